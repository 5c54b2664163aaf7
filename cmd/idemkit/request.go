package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

// requestFlags are the flags that describe a request (submit, do).
type requestFlags struct {
	url     string
	method  string
	headers []string
	data    string
	key     string
}

func (f *requestFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "url", "", "request URL (required)")
	cmd.Flags().StringVarP(&f.method, "method", "X", http.MethodPost, "request method")
	cmd.Flags().StringArrayVarP(&f.headers, "header", "H", nil, "request header 'Name: value' (repeatable)")
	cmd.Flags().StringVarP(&f.data, "data", "d", "", "request body: a string, @FILE, or @- for stdin")
	cmd.Flags().StringVar(&f.key, "key", "", "Idempotency-Key (default: a new UUID)")
}

func (f *requestFlags) request(stdin io.Reader) (*idemkit.Request, error) {
	if f.url == "" {
		return nil, usageError{fmt.Errorf("--url is required")}
	}
	h, err := parseHeaders(f.headers)
	if err != nil {
		return nil, err
	}
	body, err := readData(f.data, stdin)
	if err != nil {
		return nil, err
	}
	return &idemkit.Request{Method: f.method, URL: f.url, Header: h, Body: body, Key: f.key}, nil
}

// parseHeaders parses curl-style 'Name: value' headers.
func parseHeaders(lines []string) (http.Header, error) {
	h := http.Header{}
	for _, l := range lines {
		name, value, ok := strings.Cut(l, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, usageError{fmt.Errorf("header %q: want 'Name: value'", l)}
		}
		h.Add(name, strings.TrimSpace(value))
	}
	return h, nil
}

func readData(data string, stdin io.Reader) ([]byte, error) {
	file, ok := strings.CutPrefix(data, "@")
	if !ok {
		return []byte(data), nil
	}
	var r io.Reader = stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, idemkit.MaxBodySize+1))
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	return b, nil
}

// credentialNames are the headers the client keeps out of the queue.
var credentialNames = []string{"Authorization", "Proxy-Authorization", "Cookie"}

func credentialsIn(h http.Header) []string {
	var out []string
	for _, n := range credentialNames {
		if h.Get(n) != "" {
			out = append(out, n)
		}
	}
	return out
}
