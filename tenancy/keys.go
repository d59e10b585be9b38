package tenancy

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors of authentication and key management.
var (
	ErrBadKey  = errors.New("tenancy: invalid API key")
	ErrNoKey   = errors.New("tenancy: no such key")
	ErrRevoked = errors.New("tenancy: key revoked")
)

const (
	keyPrefix    = "lml_"
	keyIDBytes   = 5  // 8 base32 characters
	keySecretLen = 20 // 160 bits, 32 base32 characters
)

var keyEnc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Keys keeps the API keys: boltKeys (keysbolt.go: one process's, in its store) and
// RedisKeys (rediskeys.go: shared by the processes of one Redis) side by side, the
// same tests run against both (TestKeys).
type Keys interface {
	// CreateKey makes and stores a new key for tenant and returns it (the only time
	// the key is visible) with its record.
	CreateKey(tenant string, now time.Time) (string, KeyInfo, error)
	// RevokeKey revokes the key with the given id (or a whole key: its id is taken)
	// and returns its record without its hash; ErrNoKey if there is none.
	RevokeKey(id string, now time.Time) (KeyInfo, error)
	// Keys lists the keys without their hashes, sorted by tenant then creation.
	Keys() []KeyInfo
	// Authenticate returns the tenant and key id of an API key. Any failure is
	// ErrBadKey (or ErrRevoked wrapping it), never saying which part was wrong.
	Authenticate(key string) (tenant, keyID string, err error)
}

var (
	_ Keys = (*boltKeys)(nil)
	_ Keys = (*RedisKeys)(nil)
)

// KeyInfo describes a stored key (never its secret).
type KeyInfo struct {
	ID      string    `json:"id"`
	Tenant  string    `json:"tenant"`
	Created time.Time `json:"created"`
	Revoked time.Time `json:"revoked,omitzero"`
	Hash    []byte    `json:"hash,omitempty"`
}

// NewKey makes a new key for tenant: the key as the client uses it, and its record.
func NewKey(tenant string, now time.Time) (string, KeyInfo) {
	var idb [keyIDBytes]byte
	var sec [keySecretLen]byte
	_, _ = rand.Read(idb[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	_, _ = rand.Read(sec[:])
	id, secret := keyEnc.EncodeToString(idb[:]), keyEnc.EncodeToString(sec[:])
	h := hashSecret(id, secret)
	return keyPrefix + id + "_" + secret, KeyInfo{ID: id, Tenant: tenant, Created: now.UTC(), Hash: h[:]}
}

// ParseKey splits a key into its id and secret, or returns ErrBadKey.
func ParseKey(key string) (id, secret string, err error) {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return "", "", ErrBadKey
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || len(id) != 8 || len(secret) != 32 {
		return "", "", ErrBadKey
	}
	return id, secret, nil
}

func hashSecret(id, secret string) [32]byte {
	var buf [64]byte // "lml:" + 8 + ":" + 32 fits: no allocation on the hot path
	b := append(buf[:0], "lml:"...)
	b = append(b, id...)
	b = append(b, ':')
	b = append(b, secret...)
	return sha256.Sum256(b)
}

// check reports whether secret matches the key record, in constant time.
func (k *KeyInfo) check(secret string) bool {
	h := hashSecret(k.ID, secret)
	return subtle.ConstantTimeCompare(h[:], k.Hash) == 1
}

// String describes the key for listings.
func (k KeyInfo) String() string {
	s := fmt.Sprintf("%s tenant=%s created=%s", k.ID, k.Tenant, k.Created.Format(time.RFC3339))
	if !k.Revoked.IsZero() {
		s += " revoked=" + k.Revoked.Format(time.RFC3339)
	}
	return s
}
