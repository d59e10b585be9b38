package respstore

import (
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkDurableWrite is the raw cost of making one ~1 KiB record durable on this
// machine's disk, one writer (what a lone Put waits for):
//   - bbolt-commit: one db.Update putting the record (bbolt writes the dirty pages,
//     fdatasyncs, writes the meta page, fdatasyncs again);
//   - append-fdatasync: one write appended to a file, then one fdatasync (the file
//     grows, so its size is synced too);
//   - overwrite-fdatasync: one write into a file written (zeros) and synced before,
//     then one fdatasync (no size or extent change to sync).
//
// ns/op is per record.
func BenchmarkDurableWrite(b *testing.B) {
	rec := make([]byte, 1024)
	for i := range rec {
		rec[i] = byte('a' + i%26)
	}
	b.Run("bbolt-commit", func(b *testing.B) {
		db, err := bolt.Open(filepath.Join(b.TempDir(), "b.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("r")); return err }); err != nil {
			b.Fatal(err)
		}
		key := make([]byte, 8)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			key[0], key[1], key[2], key[3] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
			if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("r")).Put(key, rec) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append-fdatasync", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "j"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := f.Write(rec); err != nil {
				b.Fatal(err)
			}
			if err := datasync(f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("overwrite-fdatasync", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "j"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		const size = 64 << 20
		if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := f.WriteAt(rec, int64(i*len(rec))%size); err != nil {
				b.Fatal(err)
			}
			if err := datasync(f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
