package main

import (
	"flag"
)

// usd40 is the body of a 40.00 USD payment.
const usd40 = `{"amount": 4000, "currency": "usd", "description": "groceries"}`

func flagErrHelp() error { return flag.ErrHelp }
