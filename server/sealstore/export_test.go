package sealstore

import "github.com/idemkit/idemkit/server"

// Seal and Open expose the stored form to the package's tests.
func (s *Store) Seal(sc server.Scope, resp *server.StoredResponse) (*server.StoredResponse, error) {
	return s.sealer.seal(sc, resp)
}

func (s *Store) Open(sc server.Scope, stored *server.StoredResponse) (*server.StoredResponse, string, error) {
	return s.sealer.open(sc, stored)
}

var (
	EncodePlaintext = encodePlaintext
	DecodePlaintext = decodePlaintext
	MarkerHeader    = markerHeader
)
