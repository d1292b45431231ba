package ledger

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// checkFile looks at the meta pages of f, an existing bbolt file just opened,
// before bbolt maps it: a file cut shorter than the pages its newest meta page
// claims would make bbolt read past the end of the mapping, which crashes the
// process instead of returning an error. An empty file passes; a file whose
// meta pages are both unreadable is left for bbolt to refuse.
func checkFile(f *os.File) error {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil // bbolt's open reports it with the right wording
	}
	m0, ok0 := readMeta(f, 0)
	var m1 meta
	ok1 := false
	if ok0 {
		m1, ok1 = readMeta(f, int64(m0.pageSize))
	} else {
		// The first meta page is damaged: try the usual page size for the
		// second one.
		m1, ok1 = readMeta(f, int64(os.Getpagesize()))
	}
	m, ok := m0, ok0
	if ok1 && (!ok0 || m1.txid > m0.txid) {
		m, ok = m1, true
	}
	if !ok {
		return nil
	}
	if need := int64(m.pgid) * int64(m.pageSize); need > fi.Size() {
		return fmt.Errorf("file is %d bytes, its pages need %d: truncated: %w", fi.Size(), need, ErrCorrupt)
	}
	return nil
}

// meta is the part of a bbolt meta page that checkFile reads. Layout (native
// little-endian on the platforms we build for): a 16-byte page header, then
// magic, version, page size, flags (4 bytes each), root bucket (16),
// freelist page id (8), high-water page id (8), txid (8), checksum (8): an
// FNV-64a of the 56 bytes before it.
type meta struct {
	pageSize uint32
	pgid     uint64
	txid     uint64
}

const (
	boltMagic   = 0xED0CDAED
	boltVersion = 2
	pageHeader  = 16
	metaSize    = 64
)

func readMeta(r io.ReaderAt, off int64) (meta, bool) {
	var b [pageHeader + metaSize]byte
	if _, err := r.ReadAt(b[:], off); err != nil {
		return meta{}, false
	}
	m := b[pageHeader:]
	le := binary.LittleEndian
	if le.Uint32(m[0:]) != boltMagic || le.Uint32(m[4:]) != boltVersion {
		return meta{}, false
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if h.Sum64() != le.Uint64(m[56:]) {
		return meta{}, false
	}
	ps := le.Uint32(m[8:])
	if ps < 512 || ps > 1<<20 {
		return meta{}, false
	}
	return meta{pageSize: ps, pgid: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, true
}
