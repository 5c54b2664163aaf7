package main

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Kinds of event a child process reports.
const (
	// Server.
	evListening   = "listening"    // URL
	evChargeStart = "charge-start" // Account, Key: a payment handler started
	evAnswered    = "answered"     // Account, Key, Status, Replayed, Payment
	// Clients.
	evPersisted = "persisted" // Intent, Key: on disk, nothing sent
	evResuming  = "resuming"  // Intent, Key: found pending in the queue
	evTakeover  = "takeover"  // the SDK took the dead client's lease over
	evSend      = "send"      // Key: a request is about to leave
	evResponse  = "response"  // Key, Status, Replayed, Payment (Status 0: no answer)
	evDone      = "done"      // Intent, Key, Status, Replayed, Payment: the client's final result
	// Any role: a line of narration only.
	evInfo = "info"
)

// event is one line a child process writes on its stdout, as JSON. The demo
// prints Text on its timeline and acts on Kind.
type event struct {
	Kind     string `json:"kind"`
	At       int64  `json:"at"` // when, Unix nanoseconds
	Text     string `json:"text,omitempty"`
	URL      string `json:"url,omitempty"`
	Account  string `json:"account,omitempty"`
	Key      string `json:"key,omitempty"`
	Intent   string `json:"intent,omitempty"`
	Status   int    `json:"status,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	Payment  string `json:"payment,omitempty"`
}

// emitter writes events, one JSON object a line. It is safe for concurrent
// use.
type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func newEmitter(w io.Writer) *emitter { return &emitter{enc: json.NewEncoder(w)} }

func (e *emitter) emit(ev event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev.At = time.Now().UnixNano()
	_ = e.enc.Encode(ev)
}

func (e *emitter) info(text string) { e.emit(event{Kind: evInfo, Text: text}) }
