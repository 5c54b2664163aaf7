package main

import "flag"

// flagGiven reports whether the command line set the flag name (with
// --dsn redis://… the default --mode is lease instead of transactional).
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
