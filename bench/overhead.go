package main

import (
	"fmt"
	"io"
	"net/http"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// overheadMode is the route that measures what every request costs outside
// the handler: the load generator, the HTTP client and server, the checks
// of the answer. Its allocations per operation, in the same round, scenario
// and client count, are subtracted from each mode's to give the handler's
// own (allocs_per_op_handler).
const overheadMode = "noop"

// headerScenario tells the noop route which answer the load generator
// expects (it stores nothing, so it cannot tell a replay by itself); only
// the noop route's requests carry it.
const headerScenario = "X-Bench-Scenario"

// noop answers like an idempotent mode with neither a store nor an effect:
// a body derived from the key alone, so that a replay is byte-identical.
type noop struct{}

func (noop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp := fmt.Appendf(nil, `{"id":"noop_%s","amount":4000,"currency":"eur","request_bytes":%d}`, r.Header.Get(server.HeaderKey), len(body))
	if r.Header.Get(headerScenario) == scenarioReplay {
		w.Header().Set(wire.HeaderReplayed, "true")
	}
	writeCreated(w, resp)
}

// noopMode is the overhead route of a section.
func noopMode() serverMode {
	return serverMode{name: overheadMode, handler: noop{}, replays: true, noEffect: true}
}
