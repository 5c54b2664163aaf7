package redisstore

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// heldClaims remembers, for the claims this Store acquired and has not yet
// completed or released, the random claim id it wrote into each record.
//
// A fencing token alone cannot fence across a loss of data: a Redis that
// restarts without persistence (or fails over to a replica that had not
// received the claim) forgets the record, and the next claim of the scope
// starts again at token 1, the token an earlier holder may still be running
// with. The claim id tells them apart: Complete, ExtendLease and Release
// send the id this Store holds for (scope, token), and the scripts refuse a
// record whose id differs. The token floor keeps a Store's own tokens for a
// scope increasing across such a loss: a Store that still holds token n
// claims with n+1 at least, so its two holders never share a token.
//
// A claim id is known only to the Store that acquired the claim; the
// middleware completes, extends and releases a claim with the Store it
// claimed it with. An entry goes when its claim is completed or released
// (or refused: ErrLeaseLost), or once its window has passed.
type heldClaims struct {
	mu     sync.Mutex
	scopes map[string]map[int64]heldClaim // record key → token → claim
	adds   int
}

type heldClaim struct {
	id      string
	expires time.Time // the claim's ExpiresAt: the record is gone by then
}

// pruneEvery is how many acquired claims pass between two removals of
// entries whose window has passed.
const pruneEvery = 1024

// pruneGrace is how long past its window an entry is kept, for a Redis
// clock behind the caller's.
const pruneGrace = time.Minute

// newClaimID returns 16 random bytes, hex encoded.
func newClaimID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics on failure since Go 1.24)
	return hex.EncodeToString(b[:])
}

// floor returns one more than the highest token held for key, or 0.
func (h *heldClaims) floor(key string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var top int64
	for tok := range h.scopes[key] {
		top = max(top, tok)
	}
	if top == 0 {
		return 0
	}
	return top + 1
}

// add records the claim id of an acquired claim.
func (h *heldClaims) add(key string, token int64, id string, expires, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.scopes == nil {
		h.scopes = make(map[string]map[int64]heldClaim)
	}
	if h.adds++; h.adds%pruneEvery == 0 {
		h.pruneLocked(now)
	}
	m := h.scopes[key]
	if m == nil {
		m = make(map[int64]heldClaim, 1)
		h.scopes[key] = m
	}
	m[token] = heldClaim{id: id, expires: expires}
}

// id returns the claim id held for (key, token).
func (h *heldClaims) id(key string, token int64) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.scopes[key][token]
	return c.id, ok
}

// remove forgets (key, token).
func (h *heldClaims) remove(key string, token int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.scopes[key]
	delete(m, token)
	if len(m) == 0 {
		delete(h.scopes, key)
	}
}

// len returns how many claims are held.
func (h *heldClaims) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.scopes {
		n += len(m)
	}
	return n
}

func (h *heldClaims) pruneLocked(now time.Time) {
	for key, m := range h.scopes {
		for tok, c := range m {
			if !c.expires.Add(pruneGrace).After(now) {
				delete(m, tok)
			}
		}
		if len(m) == 0 {
			delete(h.scopes, key)
		}
	}
}
