package server

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strconv"
)

// recorder captures a handler's response so that nothing reaches the client
// before the middleware has stored (lease mode) or committed (transactional
// mode) the outcome.
//
// Flush is a no-op while the response is buffered. The recorder calls
// nothing back: the one write that takes the body past limit reports the
// overflow as a value (write), and its caller decides whether the recorder
// keeps buffering or sends what it has and streams the rest straight to the
// client (stream), where Flush then works as usual. Hijack is refused: a
// hijacked connection cannot be replayed.
type recorder struct {
	w          http.ResponseWriter
	header     http.Header
	sent       http.Header // header as of WriteHeader
	status     int
	body       bytes.Buffer
	limit      int
	overflowed bool
	streaming  bool
}

func newRecorder(w http.ResponseWriter, limit int) *recorder {
	return &recorder{w: w, header: make(http.Header), limit: limit}
}

// Header returns the header map the handler writes to.
func (rec *recorder) Header() http.Header { return rec.header }

// WriteHeader records the status. Informational (1xx) statuses are dropped.
func (rec *recorder) WriteHeader(code int) {
	if rec.status != 0 || code < 200 {
		return
	}
	if code > 999 {
		code = http.StatusInternalServerError
	}
	rec.status = code
	rec.sent = rec.header.Clone()
}

// Write buffers p, or streams it once the recorder has switched to
// streaming. A body past the limit stays buffered; a caller that may stream
// writes through write instead.
func (rec *recorder) Write(p []byte) (int, error) {
	n, _, err := rec.write(p)
	return n, err
}

// write is Write that also reports overflow: true on the one write that
// took the buffered body past the limit (and never again). The caller then
// either lets the recorder keep buffering, or calls stream.
func (rec *recorder) write(p []byte) (n int, overflow bool, err error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.streaming {
		n, err = rec.w.Write(p)
		return n, false, err
	}
	rec.body.Write(p)
	if !rec.overflowed && rec.body.Len() > rec.limit {
		rec.overflowed = true
		return len(p), true, nil
	}
	return len(p), false, nil
}

// stream sends the buffered response to the client and streams every later
// write straight to it.
func (rec *recorder) stream() {
	if rec.streaming {
		return
	}
	rec.sendHeaderAndBody(nil)
	rec.streaming = true
}

// sniff sets Content-Type from the first 512 bytes of the buffered body when
// the handler set none, like net/http does with the first bytes it buffered
// (not the first Write), so that the stored header has it too. Like
// net/http, it does not sniff an encoded body (Content-Encoding set) or a
// status that has no body.
func (rec *recorder) sniff(p []byte) {
	if _, ok := rec.sent["Content-Type"]; ok {
		return
	}
	if rec.sent.Get("Transfer-Encoding") != "" || rec.sent.Get("Content-Encoding") != "" || !bodyAllowed(rec.status) {
		return
	}
	if len(p) > 512 {
		p = p[:512]
	}
	rec.sent.Set("Content-Type", http.DetectContentType(p))
}

// Flush is a no-op while the response is buffered.
func (rec *recorder) Flush() { _ = rec.FlushError() }

// FlushError flushes the client connection once streaming, and is a no-op
// while the response is buffered.
func (rec *recorder) FlushError() error {
	if !rec.streaming {
		return nil
	}
	return http.NewResponseController(rec.w).Flush()
}

// Hijack always fails: a hijacked connection cannot be stored or replayed.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}

// Unwrap returns the client's ResponseWriter, for http.ResponseController
// (deadlines, full duplex).
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }

// wrote reports whether the handler wrote a status or any of the body.
func (rec *recorder) wrote() bool { return rec.status != 0 }

// result returns the status and header the handler answered with. A handler
// that wrote nothing answered 200.
func (rec *recorder) result() (int, http.Header) {
	if rec.status == 0 {
		return http.StatusOK, rec.header
	}
	if rec.body.Len() > 0 {
		rec.sniff(rec.body.Bytes()) // a no-op once Content-Type is set
	}
	return rec.status, rec.sent
}

// sendHeaderAndBody writes the recorded response to the client, with extra
// headers set on top.
func (rec *recorder) sendHeaderAndBody(extra http.Header) {
	status, h := rec.result()
	dst := rec.w.Header()
	for k, v := range h {
		dst[k] = v
	}
	for k, v := range extra {
		dst[k] = v
	}
	if !rec.overflowed && dst.Get("Content-Length") == "" && dst.Get("Transfer-Encoding") == "" && bodyAllowed(status) {
		dst.Set("Content-Length", strconv.Itoa(rec.body.Len()))
	}
	rec.w.WriteHeader(status)
	if bodyAllowed(status) {
		_, _ = rec.w.Write(rec.body.Bytes())
	}
	rec.body.Reset()
}

// send writes the whole buffered response to the client. It does nothing
// more once the recorder is streaming.
func (rec *recorder) send(extra http.Header) {
	if rec.streaming {
		return
	}
	rec.sendHeaderAndBody(extra)
}

// stored is what gets stored of the recorded response: the status, the
// headers named in replayHeaders (canonical names) and the body, or no body when omit is true, and the request's
// correlation id requestID, if any, in the reserved header entry.
func (rec *recorder) stored(replayHeaders map[string]bool, omit bool, requestID string) *StoredResponse {
	status, h := rec.result()
	stored := make(http.Header)
	for k, v := range h {
		if replayHeaders[http.CanonicalHeaderKey(k)] && len(v) > 0 {
			stored[http.CanonicalHeaderKey(k)] = append([]string(nil), v...)
		}
	}
	resp := &StoredResponse{Status: status, Header: withRequestID(stored, requestID), BodyOmitted: omit}
	if !omit {
		resp.Body = bytes.Clone(rec.body.Bytes())
		if resp.Body == nil {
			resp.Body = []byte{}
		}
	}
	return resp
}

func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && status >= 200
}
