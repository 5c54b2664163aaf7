package sealstore_test

import (
	"bytes"
	"database/sql"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// newUnitStore returns a Store for the tests of the stored form; its inner
// store is never called.
func newUnitStore(t testing.TB, cfg *sealstore.Config) *sealstore.Store {
	t.Helper()
	if cfg == nil {
		cfg = &sealstore.Config{Keys: map[string][]byte{"1": key1}}
	}
	st, err := sealstore.New(unusedStore{}, cfg)
	require.NoError(t, err)
	return st
}

// unusedStore is an inner store for tests that never reach it.
type unusedStore struct{ server.Store }

func sampleScope() server.Scope {
	return server.Scope{Principal: "alice", Endpoint: "*", Key: "k"}
}

// writeFile writes s to a new file at path, owner-only.
func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

func sampleResponse() *server.StoredResponse {
	return &server.StoredResponse{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Vary": {"A", "B"}, "X-Binary": {"\x00\xff"}},
		Body:   []byte(`{"id":"pay_1","receipt":"` + receiptBody + `"}`),
	}
}

// The stored form: the marker header only, the status and omitted flag in
// the clear, and a blob that names its key and hides the response.
func TestSeal_StoredForm(t *testing.T) {
	t.Parallel()
	st := newUnitStore(t, &sealstore.Config{Keys: map[string][]byte{"key-2026": key1}})
	sc := server.Scope{Principal: "alice", Endpoint: "*", Key: "k"}
	resp := sampleResponse()
	stored, err := st.Seal(sc, resp)
	require.NoError(t, err)
	require.Equal(t, http.Header{sealstore.MarkerHeader: {"1"}}, stored.Header)
	require.Equal(t, resp.Status, stored.Status)
	require.False(t, stored.BodyOmitted)
	require.Equal(t, byte(1), stored.Body[0], "format version")
	require.Equal(t, "key-2026", keyIDOf(stored.Body))
	require.False(t, bytes.Contains(stored.Body, []byte(receiptBody)))
	require.Len(t, stored.Body, 2+len("key-2026")+16+len(sealstore.EncodePlaintext(resp.Header, resp.Body))+16)

	again, err := st.Seal(sc, resp)
	require.NoError(t, err)
	require.NotEqual(t, stored.Body, again.Body, "every row has a salt of its own")

	opened, id, err := st.Open(sc, stored)
	require.NoError(t, err)
	require.Equal(t, "key-2026", id)
	require.Equal(t, resp, opened)
}

// Every part of the associated data binds: a blob opens only for its own
// scope, status and omitted flag.
func TestSeal_BoundToScopeStatusAndOmitted(t *testing.T) {
	t.Parallel()
	st := newUnitStore(t, nil)
	sc := server.Scope{Principal: "alice", Endpoint: "POST /payments", Key: "k"}
	stored, err := st.Seal(sc, sampleResponse())
	require.NoError(t, err)
	for name, other := range map[string]server.Scope{
		"principal": {Principal: "bob", Endpoint: sc.Endpoint, Key: sc.Key},
		"endpoint":  {Principal: sc.Principal, Endpoint: "*", Key: sc.Key},
		"key":       {Principal: sc.Principal, Endpoint: sc.Endpoint, Key: "k2"},
		// Length prefixes: moving a byte between parts is another scope.
		"boundary": {Principal: "alicePOST", Endpoint: " /payments", Key: sc.Key},
	} {
		_, _, err := st.Open(other, stored)
		require.ErrorContains(t, err, "authentication", name)
	}
	status := *stored
	status.Status = http.StatusOK
	_, _, err = st.Open(sc, &status)
	require.Error(t, err)
	omitted := *stored
	omitted.BodyOmitted = true
	_, _, err = st.Open(sc, &omitted)
	require.Error(t, err)
}

// An omitted body stays omitted; an empty body stays empty, not nil.
func TestSeal_EmptyAndOmittedBodies(t *testing.T) {
	t.Parallel()
	st := newUnitStore(t, nil)
	sc := server.Scope{Principal: "alice", Endpoint: "*", Key: "k"}
	for _, resp := range []*server.StoredResponse{
		{Status: http.StatusNoContent, Header: http.Header{}},
		{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain"}}, BodyOmitted: true},
		{Status: http.StatusOK, Header: nil, Body: []byte{}},
	} {
		stored, err := st.Seal(sc, resp)
		require.NoError(t, err)
		opened, _, err := st.Open(sc, stored)
		require.NoError(t, err)
		require.Equal(t, resp.BodyOmitted, opened.BodyOmitted)
		require.Len(t, opened.Body, 0)
		if !resp.BodyOmitted {
			require.NotNil(t, opened.Body)
		}
		require.Len(t, opened.Header, len(resp.Header))
	}
}

// The handle a transactional handler writes on is the inner store's, so
// sqlitestore.Tx and pgstore.Tx work unchanged (the middleware tests prove
// it through a request; this is the direct form).
func TestSealStore_TxHandleIsInnerHandle(t *testing.T) {
	t.Parallel()
	b := newSQLiteBackend(t)
	ctx := storetest.Context(t)
	tx, err := b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}}).BeginTx(ctx, storetest.LockTimeout)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.IsType(t, &sql.Tx{}, tx.Handle())
}

// The key stored with HashKeys: 46 bytes, well inside the longest key the
// wire allows, different for every scope, and the same on every call.
func TestSealStore_StoredKey(t *testing.T) {
	t.Parallel()
	st := newUnitStore(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}, HashKeys: true, HashKey: hashKey})
	a := server.Scope{Principal: "alice", Endpoint: "*", Key: string(bytes.Repeat([]byte{'k'}, 255))}
	k := st.StoredKey(a)
	require.Len(t, k, 46)
	require.Regexp(t, `^h1\.[A-Za-z0-9_-]{43}$`, k)
	require.Equal(t, k, st.StoredKey(a))
	b := a
	b.Principal = "bob"
	require.NotEqual(t, k, st.StoredKey(b), "equal keys of two principals are not linkable")

	plain := newUnitStore(t, nil)
	require.Equal(t, a.Key, plain.StoredKey(a))
}

// A stored blob or plaintext of any bytes is refused or opened, never a
// panic; the plaintext codec round-trips any header and body.
func FuzzOpen(f *testing.F) {
	st := newUnitStore(f, nil)
	sc := server.Scope{Principal: "alice", Endpoint: "*", Key: "k"}
	good, err := st.Seal(sc, sampleResponse())
	require.NoError(f, err)
	f.Add(good.Body, 201)
	f.Add([]byte{1, 1, '1'}, 200)
	f.Add([]byte{}, 200)
	f.Add(sealstore.EncodePlaintext(sampleResponse().Header, sampleResponse().Body), 201)
	f.Fuzz(func(t *testing.T, blob []byte, status int) {
		stored := &server.StoredResponse{Status: status, Header: http.Header{sealstore.MarkerHeader: {"1"}}, Body: blob}
		// The only response ever sealed under key1 for sc is
		// sampleResponse (by this process or the one that made the seed
		// corpus): a blob that opens must be one of those seals.
		if opened, _, err := st.Open(sc, stored); err == nil {
			require.Equal(t, sampleResponse(), opened, "a blob that was never sealed opened: %x", blob)
		}
		h, body, err := sealstore.DecodePlaintext(blob)
		if err != nil {
			return
		}
		h2, body2, err := sealstore.DecodePlaintext(sealstore.EncodePlaintext(h, body))
		require.NoError(t, err)
		require.Equal(t, h, h2)
		require.Equal(t, body, body2)
	})
}
