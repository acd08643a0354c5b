package control

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrDamaged: the database failed its integrity check at open. The error
// names the file and what is wrong; the control plane refuses to start on
// it. Recover with `pillar control rebuild --from-objstore` into a fresh
// database (or restore a backup).
var ErrDamaged = errors.New("control: database damaged")

// checkWAL inspects an SQLite write-ahead log before SQLite opens it
// (opening recovers the log and would hide the damage). SQLite applies the
// frames up to the first one whose salt or checksum does not match and
// silently ignores the rest, so a damaged or truncated log loses committed
// transactions without an error. This detects what the file itself shows:
//
//   - a log shorter than its 32-byte header, or a header whose checksum is
//     wrong (SQLite would ignore every frame);
//   - a frame of the current log generation (its salts match the header)
//     whose checksum fails, followed by more frames of the same generation
//     (damage in the middle: the later, committed frames are dropped);
//   - a log whose length ends inside a frame, other than right after a
//     frame header (where a process killed between SQLite's two writes of
//     a frame leaves it; that transaction was not yet committed).
//
// A log truncated exactly at a frame boundary is indistinguishable from one
// that was never longer and is not detected; nor is damage confined to the
// last frame of the live log (nothing of the same generation follows it,
// and a frame torn by a crash looks the same). Stale frames of an older
// generation (other salts) after the live ones are normal: SQLite reuses
// the file after a checkpoint.
func checkWAL(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control: sqlite %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("control: sqlite %s: %w", path, err)
	}
	size := st.Size()
	if size == 0 {
		return nil
	}
	damaged := func(format string, a ...any) error {
		return fmt.Errorf("%w: sqlite write-ahead log %s (%d bytes): %s; committed transactions after that point would be lost silently: restore the database or rebuild it (`pillar control rebuild --from-objstore`)",
			ErrDamaged, path, size, fmt.Sprintf(format, a...))
	}
	if size < 32 {
		return damaged("shorter than its 32-byte header")
	}
	hdr := make([]byte, 32)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return fmt.Errorf("control: sqlite %s: %w", path, err)
	}
	magic := binary.BigEndian.Uint32(hdr[0:])
	if magic != 0x377f0682 && magic != 0x377f0683 {
		return damaged("bad magic %#x", magic)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if magic&1 == 1 {
		order = binary.BigEndian
	}
	pageSize := int64(binary.BigEndian.Uint32(hdr[8:]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || pageSize > 65536 || pageSize&(pageSize-1) != 0 {
		return damaged("bad page size %d", pageSize)
	}
	s0, s1 := walChecksum(order, hdr[:24], 0, 0)
	if s0 != binary.BigEndian.Uint32(hdr[24:]) || s1 != binary.BigEndian.Uint32(hdr[28:]) {
		return damaged("header checksum mismatch")
	}
	salt1, salt2 := binary.BigEndian.Uint32(hdr[16:]), binary.BigEndian.Uint32(hdr[20:])
	frameSize := 24 + pageSize
	frame := make([]byte, frameSize)
	valid, broken := int64(0), int64(-1)
	for off := int64(32); off+frameSize <= size; off += frameSize {
		if _, err := f.ReadAt(frame, off); err != nil {
			return fmt.Errorf("control: sqlite %s: %w", path, err)
		}
		current := binary.BigEndian.Uint32(frame[8:]) == salt1 && binary.BigEndian.Uint32(frame[12:]) == salt2
		if broken >= 0 {
			if current {
				return damaged("frame %d fails its checksum but frame %d after it belongs to the same log generation", broken, (off-32)/frameSize)
			}
			continue
		}
		if !current {
			broken = (off - 32) / frameSize // the end of the live log
			continue
		}
		a0, a1 := walChecksum(order, frame[:8], s0, s1)
		a0, a1 = walChecksum(order, frame[24:], a0, a1)
		if a0 != binary.BigEndian.Uint32(frame[16:]) || a1 != binary.BigEndian.Uint32(frame[20:]) {
			broken = (off - 32) / frameSize
			continue
		}
		s0, s1 = a0, a1
		valid++
	}
	if tail := (size - 32) % frameSize; tail != 0 && tail != 24 && broken < 0 {
		if tail >= 16 {
			// A partial frame of an older generation is stale, not lost.
			h := make([]byte, 16)
			if _, err := f.ReadAt(h, size-tail); err != nil {
				return fmt.Errorf("control: sqlite %s: %w", path, err)
			}
			if binary.BigEndian.Uint32(h[8:]) != salt1 || binary.BigEndian.Uint32(h[12:]) != salt2 {
				return nil
			}
		}
		return damaged("it ends %d bytes into frame %d (frames are %d bytes): truncated", tail, valid, frameSize)
	}
	return nil
}

// walChecksum is SQLite's WAL checksum over b (a multiple of 8 bytes),
// continuing from s0, s1.
func walChecksum(order binary.ByteOrder, b []byte, s0, s1 uint32) (uint32, uint32) {
	for i := 0; i+8 <= len(b); i += 8 {
		s0 += order.Uint32(b[i:]) + s1
		s1 += order.Uint32(b[i+4:]) + s0
	}
	return s0, s1
}

// quickCheck runs SQLite's PRAGMA quick_check (every page and record is
// well formed; it skips the index-versus-table comparison of
// integrity_check, so it stays fast on a large log) and returns ErrDamaged
// with its findings.
func quickCheck(ctx context.Context, db *sql.DB, target string) error {
	rows, err := db.QueryContext(ctx, `PRAGMA quick_check(20)`)
	if err != nil && ctx.Err() != nil {
		// Canceled or timed out: nothing is known about the file.
		return fmt.Errorf("control: %s: quick_check: %w", target, err)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: quick_check: %w", ErrDamaged, target, err)
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("%w: %s: quick_check: %w", ErrDamaged, target, err)
		}
		if line != "ok" {
			found = append(found, line)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: %s: quick_check: %w", ErrDamaged, target, err)
	}
	if len(found) > 0 {
		return fmt.Errorf("%w: %s: quick_check: %s", ErrDamaged, target, strings.Join(found, "; "))
	}
	return nil
}
