package gateway

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// The end-user identifiers a request may carry (user, safety_identifier) are kept
// with its usage record (the ledger entry) for abuse tracing, never as given: each is
// an HMAC-SHA-256 under the server's identifier key, of the tenant and the value,
// truncated to 128 bits (32 hex digits). The same value of the same tenant gives the
// same hash while the key stays (Options.IdentifierKey; without one a random key per
// process); another tenant's same value gives another.

// identifierKeyBytes is the size of a random identifier key.
const identifierKeyBytes = 32

// newIdentifierKey returns key, or a random key when key is empty.
func newIdentifierKey(key []byte) []byte {
	if len(key) > 0 {
		return append([]byte(nil), key...)
	}
	k := make([]byte, identifierKeyBytes)
	rand.Read(k) // never fails (crypto/rand)
	return k
}

// hashIdentifier is the kept form of an end-user identifier of tenant: "" for "".
func (s *Server) hashIdentifier(tenant, v string) string {
	if v == "" {
		return ""
	}
	return keyedHash(s.idKey, tenant, v)
}

// keyedHash is HMAC-SHA-256 under key of tenant and v (length-prefixed, so no two
// pairs share an input), truncated to 16 bytes, in hex.
func keyedHash(key []byte, tenant, v string) string {
	m := hmac.New(sha256.New, key)
	var n [4]byte
	n[0], n[1], n[2], n[3] = byte(len(tenant)>>24), byte(len(tenant)>>16), byte(len(tenant)>>8), byte(len(tenant))
	m.Write(n[:])
	m.Write([]byte(tenant))
	m.Write([]byte(v))
	sum := m.Sum(nil)
	return hex.EncodeToString(sum[:16])
}
