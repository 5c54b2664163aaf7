package sealstore_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server/sealstore"
)

func TestNew_InvalidConfigNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  *sealstore.Config
		want string
	}{
		{"nil", nil, "Keys is required"},
		{"no keys", &sealstore.Config{}, "Keys is empty"},
		{"short key", &sealstore.Config{Keys: map[string][]byte{"1": key1[:16]}}, `Keys["1"] is 16 bytes, want 32`},
		{"empty id", &sealstore.Config{Keys: map[string][]byte{"": key1}}, "must be 1 to 64 bytes"},
		{"id with space", &sealstore.Config{Keys: map[string][]byte{"a b": key1}}, "printable ASCII"},
		{"long id", &sealstore.Config{Keys: map[string][]byte{string(bytes.Repeat([]byte{'a'}, 65)): key1}}, "must be 1 to 64 bytes"},
		{"no current", &sealstore.Config{Keys: map[string][]byte{"1": key1, "2": key2}}, "Current is empty"},
		{"unknown current", &sealstore.Config{Keys: map[string][]byte{"1": key1}, Current: "2"}, `Current "2" is not a key id`},
		{"hash without key", &sealstore.Config{Keys: map[string][]byte{"1": key1}, HashKeys: true}, "HashKey is 0 bytes"},
		{"short hash key", &sealstore.Config{Keys: map[string][]byte{"1": key1}, HashKeys: true, HashKey: hashKey[:31]}, "HashKey is 31 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sealstore.New(unusedStore{}, tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err := sealstore.New(nil, &sealstore.Config{Keys: map[string][]byte{"1": key1}})
	require.ErrorContains(t, err, "inner store is nil")
}

// New copies the keys: a caller that wipes its slice after New does not
// change the store's key.
func TestNew_CopiesKeys(t *testing.T) {
	t.Parallel()
	k := bytes.Clone(key1)
	h := bytes.Clone(hashKey)
	keys := map[string][]byte{"1": k}
	st := newUnitStore(t, &sealstore.Config{Keys: keys, HashKeys: true, HashKey: h})
	sc := sampleScope()
	stored, err := st.Seal(sc, sampleResponse())
	require.NoError(t, err)
	storedKey := st.StoredKey(sc)
	clear(k)
	clear(h)
	delete(keys, "1")
	_, _, err = st.Open(sc, stored)
	require.NoError(t, err)
	require.Equal(t, storedKey, st.StoredKey(sc))
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	hex := "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF"
	key, err := sealstore.ParseKey([]byte(hex + "\n"))
	require.NoError(t, err)
	require.Len(t, key, sealstore.KeySize)
	require.Equal(t, byte(0xff), key[31])
	for _, bad := range []string{"", hex[:62], hex + "00", "zz" + hex[2:]} {
		_, err := sealstore.ParseKey([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}

func TestReadKeyFile(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/idem.key"
	_, err := sealstore.ReadKeyFile(path)
	require.Error(t, err)
	require.NoError(t, writeFile(path, "0011223344556677889900112233445566778899001122334455667788990011\n"))
	key, err := sealstore.ReadKeyFile(path)
	require.NoError(t, err)
	require.Len(t, key, sealstore.KeySize)
	require.Regexp(t, `^k[0-9a-f]{16}$`, sealstore.KeyID(key))
	require.Equal(t, sealstore.KeyID(key), sealstore.KeyID(bytes.Clone(key)))
	require.NotEqual(t, sealstore.KeyID(key1), sealstore.KeyID(key2))
}
