package policy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// Send sends one attempt with hc and reads its answer as [Facts] wants it:
// the response, its body (up to MaxBodySize+1 bytes, so that a longer one
// can be told apart) and the transport error. The body is closed and can
// be read again from the response. An answer cut off by the network is no
// answer: its read error is returned, with a nil response.
func Send(hc *http.Client, req *http.Request) (*http.Response, []byte, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodySize+1))
	resp.Body.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("reading response body: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, body, nil
}
