package main

import (
	"context"
	"net"
	"net/http"
	"time"
)

// target is the routes of one section's server on loopback: where its cells
// send requests and how they count the effects a cell left.
type target struct {
	section string // the report's section of its cells
	baseURL string
	hc      *http.Client
	modes   []serverMode
	// effects counts the effect rows of cell cellID: all of them, their
	// distinct keys, and those of a mode other than mode.
	effects func(ctx context.Context, cellID int, mode string) (rows, keys, otherMode int64, err error)
}

// serve serves each of t.modes at POST /<name> on 127.0.0.1 and sets
// t.baseURL and t.hc (keep-alive, up to maxClients idle connections); close
// stops the server and the client.
func (t *target) serve(maxClients int) (closeFn func(), err error) {
	mux := http.NewServeMux()
	for _, m := range t.modes {
		mux.Handle("POST /"+m.name, m.handler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.baseURL = "http://" + ln.Addr().String() + "/"
	tr := &http.Transport{MaxIdleConns: maxClients * 2, MaxIdleConnsPerHost: maxClients * 2}
	t.hc = &http.Client{Transport: tr, Timeout: time.Minute}
	return func() {
		_ = srv.Close()
		tr.CloseIdleConnections()
	}, nil
}

// maxClients is the largest number of concurrent clients of any cell.
func (c config) maxClients() int {
	n := max(1, c.SweepCalls)
	for _, k := range c.Clients {
		n = max(n, k)
	}
	return n
}
