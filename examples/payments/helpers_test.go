package main

import (
	"bytes"
	"flag"
	"sync"
)

// usd40 is the body of a 40.00 USD payment.
const usd40 = `{"amount": 4000, "currency": "usd", "description": "groceries"}`

func flagErrHelp() error { return flag.ErrHelp }

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
