package sealstore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"sync"

	"github.com/idemkit/idemkit/server"
)

// The stored form, version 1; the package doc describes it.
const (
	formatV1 = 1
	// markerHeader is the only header of a sealed StoredResponse as the
	// inner store keeps it; its value is the format version.
	markerHeader = "Idemkit-Sealed"
	markerV1     = "1"
	saltSize     = 16
	tagSize      = 16
	aadLabel     = "idemkit/sealstore v1"
	rowKeyInfo   = "idemkit/sealstore v1 row"
)

// zeroNonce is the nonce of every row: each row has a key of its own.
var zeroNonce [12]byte

// sealer seals and opens responses with the configured keys.
type sealer struct {
	keys    map[string]*masterKey
	current string
}

// newSealer returns a sealer of keys, sealing with current.
func newSealer(keys map[string][]byte, current string) sealer {
	k := sealer{keys: make(map[string]*masterKey, len(keys)), current: current}
	for id, key := range keys {
		mk := &masterKey{}
		mk.macs.New = func() any { return hmac.New(sha256.New, key) }
		k.keys[id] = mk
	}
	return k
}

// masterKey is one configured key, as the HMACs the row keys are derived
// with (an HMAC is safe for one goroutine at a time, so they are pooled).
type masterKey struct {
	macs sync.Pool // of hash.Hash: HMAC-SHA256 keyed with the key
}

// rowAEAD returns the AES-256-GCM of the row whose salt is salt: its key
// is HKDF-Expand-SHA256 with the master key as the pseudorandom key and
// rowKeyInfo || salt as the info, one block, that is
// HMAC-SHA256(key, rowKeyInfo || salt || 0x01).
func (mk *masterKey) rowAEAD(salt []byte) (cipher.AEAD, error) {
	mac := mk.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write([]byte(rowKeyInfo))
	mac.Write(salt)
	mac.Write([]byte{1})
	var rowKey [sha256.Size]byte
	mac.Sum(rowKey[:0])
	mk.macs.Put(mac)
	block, err := aes.NewCipher(rowKey[:])
	if err != nil {
		return nil, fmt.Errorf("idemkit/server/sealstore: %w", err)
	}
	return cipher.NewGCM(block)
}

// seal returns the stored form of resp for scope sc, sealed with the
// current key.
func (k *sealer) seal(sc server.Scope, resp *server.StoredResponse) (*server.StoredResponse, error) {
	id := k.current
	head := make([]byte, 0, 2+len(id)+saltSize)
	head = append(head, formatV1, byte(len(id)))
	head = append(head, id...)
	var salt [saltSize]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return nil, fmt.Errorf("idemkit/server/sealstore: read random salt: %w", err)
	}
	head = append(head, salt[:]...)
	aead, err := k.keys[id].rowAEAD(salt[:])
	if err != nil {
		return nil, err
	}
	plain := encodePlaintext(resp.Header, resp.Body)
	blob := make([]byte, len(head), len(head)+len(plain)+tagSize)
	copy(blob, head)
	blob = aead.Seal(blob, zeroNonce[:], plain, additionalData(head, sc, resp.Status, resp.BodyOmitted))
	return &server.StoredResponse{
		Status:      resp.Status,
		Header:      http.Header{markerHeader: {markerV1}},
		Body:        blob,
		BodyOmitted: resp.BodyOmitted,
	}, nil
}

// open returns the response stored as stored for scope sc. It returns the
// key id the blob names (when it names one) and the cause of a failure.
func (k *sealer) open(sc server.Scope, stored *server.StoredResponse) (*server.StoredResponse, string, error) {
	blob := stored.Body
	if len(blob) < 2 || blob[0] != formatV1 {
		return nil, "", fmt.Errorf("%w: unknown format version", errFormat)
	}
	n := int(blob[1])
	if n == 0 || len(blob) < 2+n+saltSize+tagSize {
		return nil, "", fmt.Errorf("%w: %d bytes is too short", errFormat, len(blob))
	}
	id := string(blob[2 : 2+n])
	headLen := 2 + n + saltSize
	mk, ok := k.keys[id]
	if !ok {
		return nil, id, errUnknownKey
	}
	aead, err := mk.rowAEAD(blob[2+n : headLen])
	if err != nil {
		return nil, id, err
	}
	plain, err := aead.Open(nil, zeroNonce[:], blob[headLen:], additionalData(blob[:headLen], sc, stored.Status, stored.BodyOmitted))
	if err != nil {
		return nil, id, errAuth
	}
	h, body, err := decodePlaintext(plain)
	if err != nil {
		return nil, id, err
	}
	resp := &server.StoredResponse{Status: stored.Status, Header: h, BodyOmitted: stored.BodyOmitted}
	if !stored.BodyOmitted {
		resp.Body = body
	}
	return resp, id, nil
}

// additionalData binds a blob to its head (version, key id, salt), its
// scope with the client's key, its status and its body-omitted flag.
func additionalData(head []byte, sc server.Scope, status int, omitted bool) []byte {
	size := len(aadLabel) + len(head) + 3*8 + len(sc.Principal) + len(sc.Endpoint) + len(sc.Key) + 8 + 1
	ad := make([]byte, 0, size)
	ad = append(ad, aadLabel...)
	ad = append(ad, head...)
	for _, part := range []string{sc.Principal, sc.Endpoint, sc.Key} {
		ad = binary.BigEndian.AppendUint64(ad, uint64(len(part)))
		ad = append(ad, part...)
	}
	ad = binary.BigEndian.AppendUint64(ad, uint64(int64(status)))
	if omitted {
		return append(ad, 1)
	}
	return append(ad, 0)
}

// encodePlaintext returns the header, in name order, then the body.
func encodePlaintext(h http.Header, body []byte) []byte {
	names := make([]string, 0, len(h))
	size := binary.MaxVarintLen64 + len(body)
	for name, vals := range h {
		names = append(names, name)
		size += 2*binary.MaxVarintLen64 + len(name)
		for _, v := range vals {
			size += binary.MaxVarintLen64 + len(v)
		}
	}
	slices.Sort(names)
	p := make([]byte, 0, size)
	p = binary.AppendUvarint(p, uint64(len(names)))
	for _, name := range names {
		p = binary.AppendUvarint(p, uint64(len(name)))
		p = append(p, name...)
		vals := h[name]
		p = binary.AppendUvarint(p, uint64(len(vals)))
		for _, v := range vals {
			p = binary.AppendUvarint(p, uint64(len(v)))
			p = append(p, v...)
		}
	}
	return append(p, body...)
}

// decodePlaintext parses what encodePlaintext wrote. It never panics; the
// body it returns is never nil.
func decodePlaintext(p []byte) (http.Header, []byte, error) {
	d := decoder{p: p}
	names := d.count()
	h := make(http.Header, min(names, 64))
	for range names {
		name := d.bytes()
		count := d.count()
		vals := make([]string, 0, min(count, 64))
		for range count {
			vals = append(vals, string(d.bytes()))
		}
		if d.err != nil {
			break
		}
		h[string(name)] = vals
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	return h, append([]byte{}, d.p...), nil
}

// decoder reads uvarint-prefixed fields, remembering the first error.
type decoder struct {
	p   []byte
	err error
}

// count reads a count; a count larger than the bytes left is malformed,
// since every counted item takes at least one byte.
func (d *decoder) count() int {
	if d.err != nil {
		return 0
	}
	n, k := binary.Uvarint(d.p)
	if k <= 0 || n > uint64(len(d.p)-k) {
		d.err = fmt.Errorf("%w: bad count in the plaintext", errFormat)
		return 0
	}
	d.p = d.p[k:]
	return int(n)
}

// bytes reads a length-prefixed field.
func (d *decoder) bytes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	b := d.p[:n]
	d.p = d.p[n:]
	return b
}
