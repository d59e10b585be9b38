package tenancy

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// boltKeys is Keys in the store's bbolt file (its keys bucket: key id → the KeyInfo
// as JSON, never the secret), with a copy in memory that authentication reads; one
// process's. RedisKeys (rediskeys.go) is the same for processes sharing a Redis.
type boltKeys struct {
	db   *bolt.DB
	mu   sync.RWMutex        // guards keys
	keys map[string]*KeyInfo // by id; a copy of the keys bucket
}

// loadBoltKeys reads the keys bucket of tx into a boltKeys on db.
func loadBoltKeys(db *bolt.DB, tx *bolt.Tx) (*boltKeys, error) {
	k := &boltKeys{db: db, keys: map[string]*KeyInfo{}}
	err := tx.Bucket(bucketKeys).ForEach(func(id, v []byte) error {
		var ki KeyInfo
		if err := json.Unmarshal(v, &ki); err != nil {
			return fmt.Errorf("key %q: %w", id, err)
		}
		k.keys[ki.ID] = &ki
		return nil
	})
	return k, err
}

func (k *boltKeys) CreateKey(tenant string, now time.Time) (string, KeyInfo, error) {
	if tenant == "" {
		return "", KeyInfo{}, errors.New("tenancy: empty tenant")
	}
	key, ki := NewKey(tenant, now)
	if err := k.put(&ki); err != nil {
		return "", KeyInfo{}, err
	}
	return key, ki, nil
}

func (k *boltKeys) put(ki *KeyInfo) error {
	v, err := json.Marshal(ki)
	if err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	err = k.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketKeys).Put([]byte(ki.ID), v) })
	if err != nil {
		return fmt.Errorf("tenancy: store key: %w", err)
	}
	k.mu.Lock()
	c := *ki
	k.keys[ki.ID] = &c
	k.mu.Unlock()
	return nil
}

func (k *boltKeys) RevokeKey(id string, now time.Time) (KeyInfo, error) {
	if kid, _, err := ParseKey(id); err == nil {
		id = kid
	}
	k.mu.RLock()
	p, ok := k.keys[id]
	var ki KeyInfo
	if ok {
		ki = *p
	}
	k.mu.RUnlock()
	if !ok {
		return KeyInfo{}, fmt.Errorf("%w: %q", ErrNoKey, id)
	}
	if ki.Revoked.IsZero() {
		ki.Revoked = now.UTC()
		if err := k.put(&ki); err != nil {
			return KeyInfo{}, err
		}
	}
	ki.Hash = nil
	return ki, nil
}

func (k *boltKeys) Keys() []KeyInfo {
	return listKeys(&k.mu, k.keys)
}

func (k *boltKeys) Authenticate(key string) (tenant, keyID string, err error) {
	id, secret, err := ParseKey(key)
	if err != nil {
		return "", "", err
	}
	k.mu.RLock()
	ki, ok := k.keys[id]
	k.mu.RUnlock()
	return authenticate(ki, ok, id, secret)
}

// authenticate checks secret against the key record ki (ok: found; a key not found
// costs the same hashing), as both Keys do.
func authenticate(ki *KeyInfo, ok bool, id, secret string) (tenant, keyID string, err error) {
	if !ok {
		dummy := KeyInfo{ID: id} // same work as a real comparison
		dummy.check(secret)
		return "", "", ErrBadKey
	}
	if !ki.check(secret) {
		return "", "", ErrBadKey
	}
	if !ki.Revoked.IsZero() {
		return "", "", fmt.Errorf("%w (%w)", ErrBadKey, ErrRevoked)
	}
	return ki.Tenant, ki.ID, nil
}

// sortKeys sorts a listing by tenant, then creation.
// listKeys copies the keys in m (read under mu) without their hashes, sorted as
// sortKeys sorts them: both Keys implementations list this way.
func listKeys(mu *sync.RWMutex, m map[string]*KeyInfo) []KeyInfo {
	mu.RLock()
	out := make([]KeyInfo, 0, len(m))
	for _, ki := range m {
		c := *ki
		c.Hash = nil
		out = append(out, c)
	}
	mu.RUnlock()
	sortKeys(out)
	return out
}

func sortKeys(out []KeyInfo) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Created.Before(out[j].Created)
	})
}
