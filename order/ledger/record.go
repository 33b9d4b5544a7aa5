package ledger

import (
	"bytes"
	"crypto/hmac"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// A record is a 36-byte header and the block's bytes:
//
//	 0  magic "LBK1"
//	 4  size of the block, uint32
//	 8  block number, uint64
//	16  synced: the ledger's durable height when the record was written
//	24  CRC-32C of the block
//	28  tag: the first 8 bytes of HMAC-SHA256, under the ledger's key, of
//	    the record's offset (uint64) and bytes 0-27
//
// All integers are little-endian. The key makes the tag one that only
// the ledger can compute: bytes inside a block (chosen by a client, who
// never learns the key) cannot pass for a header. The offset in the tag
// keeps a header copied to another offset from passing for one. The magic
// makes the search for intact records after a damaged one a fast byte
// search, and a run of zeros never a header.
const (
	headerSize = 36
	tagged     = 28 // the header bytes the tag covers
)

var magic = []byte("LBK1")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type header struct {
	size   uint32
	number uint64
	synced uint64
	sum    uint32
}

// putHeader fills b (headerSize bytes) with h for a record at offset off.
func (k *headerKey) putHeader(b []byte, h header, off int64) {
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[4:], h.size)
	binary.LittleEndian.PutUint64(b[8:], h.number)
	binary.LittleEndian.PutUint64(b[16:], h.synced)
	binary.LittleEndian.PutUint32(b[24:], h.sum)
	k.tag(b[tagged:headerSize], b, off)
}

// parseHeader decodes the header at the start of b, read from offset off;
// why says what is wrong with it, "" if nothing. A size above maxBlock is
// wrong.
func (k *headerKey) parseHeader(b []byte, off int64, maxBlock int) (h header, why string) {
	if len(b) < headerSize {
		return h, "short header"
	}
	if !bytes.Equal(b[:4], magic) {
		return h, "no record magic"
	}
	var tag [headerSize - tagged]byte
	k.tag(tag[:], b, off)
	if !hmac.Equal(tag[:], b[tagged:headerSize]) {
		return h, "header tag mismatch"
	}
	h = header{
		size:   binary.LittleEndian.Uint32(b[4:]),
		number: binary.LittleEndian.Uint64(b[8:]),
		synced: binary.LittleEndian.Uint64(b[16:]),
		sum:    binary.LittleEndian.Uint32(b[24:]),
	}
	if int64(h.size) > int64(maxBlock) {
		return h, fmt.Sprintf("block size %d above the limit %d", h.size, maxBlock)
	}
	return h, ""
}

// crc32Castagnoli is the CRC-32C of b.
func crc32Castagnoli(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// checkBlock checks a record's block as read from disk against its header.
func checkBlock(h header, block []byte) string {
	if crc32.Checksum(block, castagnoli) != h.sum {
		return "block checksum mismatch"
	}
	return ""
}

// scanner reads the records of one segment file without holding more
// than a small buffer: a block's checksum is computed as it streams by.
type scanner struct {
	key      *headerKey
	f        *os.File
	size     int64 // the file's size
	maxBlock int
	hdr      [headerSize]byte
	buf      []byte
}

func newScanner(key *headerKey, f *os.File, maxBlock int) (*scanner, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return &scanner{key: key, f: f, size: fi.Size(), maxBlock: maxBlock, buf: make([]byte, 64<<10)}, nil
}

// record checks the record at off, which should hold block number want.
// verify also checks the block's checksum (otherwise only the header is
// read). It returns the header, or why the record is damaged, or an I/O
// error.
func (s *scanner) record(off int64, want uint64, verify bool) (header, string, error) {
	h, why, err := s.check(off, verify)
	if why == "" && err == nil && h.number != want {
		why = fmt.Sprintf("block number %d, want %d", h.number, want)
	}
	return h, why, err
}

// check is record for any block number.
func (s *scanner) check(off int64, verify bool) (header, string, error) {
	if off+headerSize > s.size {
		return header{}, "record header cut short by the end of the file", nil
	}
	if _, err := s.f.ReadAt(s.hdr[:], off); err != nil {
		return header{}, "", err
	}
	return s.checkHeader(s.hdr[:], off, verify)
}

// checkHeader is check with the header at the start of b, read from off.
func (s *scanner) checkHeader(b []byte, off int64, verify bool) (header, string, error) {
	h, why := s.key.parseHeader(b, off, s.maxBlock)
	if why != "" {
		return h, why, nil
	}
	if off+headerSize+int64(h.size) > s.size {
		return h, "block cut short by the end of the file", nil
	}
	if verify {
		sum, err := s.blockSum(off+headerSize, int64(h.size))
		if err != nil {
			return h, "", err
		}
		if sum != h.sum {
			return h, "block checksum mismatch", nil
		}
	}
	return h, "", nil
}

// blockSum returns the CRC-32C of n bytes at off.
func (s *scanner) blockSum(off, n int64) (uint32, error) {
	var sum uint32
	r := io.NewSectionReader(s.f, off, n)
	for {
		k, err := r.Read(s.buf)
		sum = crc32.Update(sum, castagnoli, s.buf[:k])
		if err == io.EOF {
			return sum, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// vouched looks at and after from for an intact record of a block after
// number k whose header says k was durable when it was written: proof
// that damage to block k is not a torn write. It returns the record's
// offset and number, or -1.
func (s *scanner) vouched(from int64, k uint64) (int64, uint64, error) {
	chunk := make([]byte, 1<<20)
	for base := from; base+headerSize <= s.size; {
		n, err := s.f.ReadAt(chunk, base)
		if err != nil && err != io.EOF {
			return -1, 0, err
		}
		b := chunk[:n]
		for i := 0; ; {
			j := bytes.Index(b[i:], magic)
			if j < 0 {
				break
			}
			at := base + int64(i+j)
			// Checked in the chunk if it holds the header whole: a
			// block may hold a magic every 4 bytes.
			var h header
			var why string
			if hb := b[i+j:]; len(hb) >= headerSize {
				h, why, err = s.checkHeader(hb, at, false)
			} else {
				h, why, err = s.check(at, false)
			}
			if err != nil {
				return -1, 0, err
			}
			if why == "" && h.number > k && h.synced > k {
				if _, why, err := s.check(at, true); err != nil {
					return -1, 0, err
				} else if why == "" {
					return at, h.number, nil
				}
			}
			i += j + 1
		}
		if base+int64(n) >= s.size {
			break
		}
		// The next chunk starts where a magic cut by this one's end would.
		base += int64(n - len(magic) + 1)
	}
	return -1, 0, nil
}
