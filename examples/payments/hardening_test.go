package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/internal/testkit"
)

// startInProcess runs the API in process with args added and returns its
// address (host:port).
func startInProcess(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r, w := io.Pipe()
	var stderr testkit.SyncBuffer
	errc := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "p.db"), "--sweep", "0"}, args...), w, &stderr)
		w.Close()
		errc <- err
	}()
	t.Cleanup(func() {
		cancel()
		go func() { _, _ = io.Copy(io.Discard, r) }()
		require.NoError(t, <-errc)
	})
	line, err := bufio.NewReader(r).ReadString('\n')
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on http://")
	require.True(t, ok, "got %q", line)
	return addr
}

// requireClosedWithin sends raw on a new connection and requires the
// server to close it (after whatever answer) within d.
func requireClosedWithin(t *testing.T, addr, raw string, d time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, raw)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(d)))
	_, err = io.Copy(io.Discard, conn)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the server kept the connection open for %v", d)
}

// A client that sends its headers or its body slowly, or holds an idle
// connection, is disconnected after the read timeouts (the report: 100
// slow-body connections stayed open for 16 s and took the example from 15
// to 134 MB); oversized headers get 431 and an oversized body 413.
func TestRun_ServerLimits(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t, "--read-timeout", "300ms")
	const wait = 5 * time.Second

	t.Run("SlowBody", func(t *testing.T) {
		t.Parallel()
		requireClosedWithin(t, addr, "POST /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n"+
			"Idempotency-Key: slow\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"amount\":", wait)
	})
	t.Run("SlowHeaders", func(t *testing.T) {
		t.Parallel()
		requireClosedWithin(t, addr, "POST /v1/payments HTTP/1.1\r\nHost: x\r\n", wait)
	})
	t.Run("Idle", func(t *testing.T) {
		t.Parallel()
		requireClosedWithin(t, addr, "", wait)
	})
	t.Run("HeadersTooLarge", func(t *testing.T) {
		t.Parallel()
		resp := rawPost(t, addr, map[string]string{"X-Pad": strings.Repeat("a", 64<<10)}, usd40)
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	})
	t.Run("BodyTooLarge", func(t *testing.T) {
		t.Parallel()
		body := `{"amount": 4000, "currency": "usd", "description": "` + strings.Repeat("x", paymentsapi.MaxBodyBytes) + `"}`
		resp := rawPost(t, addr, nil, body)
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	})
}

func rawPost(t *testing.T, addr string, headers map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/payments", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", "limits-"+t.Name())
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}
