// Package pqzstd is a Parquet ZSTD codec whose encoders use a small window.
//
// parquet-go's zstd.Codec builds its pooled encoders with the library's
// default 8 MiB window, and each pooled encoder then keeps a history buffer
// of that size: a process writing a few tables at once holds tens of
// megabytes of it, which under a small --memory-limit is most of the
// budget. A Parquet page is compressed on its own (EncodeAll of one page,
// at most a few hundred KiB unless a single value is larger), so a window
// beyond the page size finds no further matches: Codec compresses pages as
// well with Window bytes and writes standard ZSTD frames that any reader
// decodes.
//
// A Codec may be used by many goroutines at once.
package pqzstd

import (
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// DefaultWindow is the encoder window of Default: 1 MiB, four times
// parquet-go's default page buffer.
const DefaultWindow = 1 << 20

// Default is the codec the embedded store writes with.
var Default = &Codec{}

// Codec is a ZSTD compress.Codec (parquet.Compression(codec)).
type Codec struct {
	// Level is the encoder level. The default value is zstd.SpeedDefault.
	Level zstd.EncoderLevel
	// Window is the encoder window in bytes, a power of two from 1 KiB. The
	// default value is DefaultWindow.
	Window int

	encoders sync.Pool
	decoders sync.Pool
}

func (c *Codec) String() string { return "ZSTD" }

// CompressionCodec is ZSTD: files read back with any ZSTD codec.
func (c *Codec) CompressionCodec() format.CompressionCodec { return format.Zstd }

// Encode compresses src into dst (whose storage it may reuse).
func (c *Codec) Encode(dst, src []byte) ([]byte, error) {
	e, _ := c.encoders.Get().(*zstd.Encoder)
	if e == nil {
		var err error
		if e, err = c.newEncoder(); err != nil {
			return dst[:0], err
		}
	}
	defer c.encoders.Put(e)
	return e.EncodeAll(src, dst[:0]), nil
}

// newEncoder builds an encoder with c's level and window.
func (c *Codec) newEncoder() (*zstd.Encoder, error) {
	level, window := c.Level, c.Window
	if level == 0 {
		level = zstd.SpeedDefault
	}
	if window == 0 {
		window = DefaultWindow
	}
	return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(level),
		zstd.WithWindowSize(window), zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false), zstd.WithLowerEncoderMem(true))
}

// Decode decompresses src into dst (whose storage it may reuse).
func (c *Codec) Decode(dst, src []byte) ([]byte, error) {
	d, _ := c.decoders.Get().(*zstd.Decoder)
	if d == nil {
		var err error
		d, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return dst[:0], err
		}
	}
	defer c.decoders.Put(d)
	return d.DecodeAll(src, dst[:0])
}
