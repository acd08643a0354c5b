package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"
)

// ErrCorrupt is wrapped by every error about bytes that are not a valid
// record or embedding.
var ErrCorrupt = errors.New("record: corrupt")

// DefaultEncoding is the embedding encoding used when none is chosen.
const DefaultEncoding = Encoding_ENCODING_FLOAT16

// ParseEncoding parses "float32", "float16" or "int8" (case-insensitive; the
// empty string means DefaultEncoding).
func ParseEncoding(s string) (Encoding, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return DefaultEncoding, nil
	case "float32", "f32":
		return Encoding_ENCODING_FLOAT32, nil
	case "float16", "f16", "half":
		return Encoding_ENCODING_FLOAT16, nil
	case "int8", "i8":
		return Encoding_ENCODING_INT8, nil
	}
	return 0, fmt.Errorf("record: encoding %q: want float32, float16 or int8", s)
}

// Short returns the encoding's short name: "float32", "float16" or "int8".
func (e Encoding) Short() string {
	switch e {
	case Encoding_ENCODING_FLOAT32:
		return "float32"
	case Encoding_ENCODING_FLOAT16:
		return "float16"
	case Encoding_ENCODING_INT8:
		return "int8"
	}
	return fmt.Sprintf("encoding(%d)", int32(e))
}

// ElemSize returns the bytes per element of the encoding, 0 if unknown.
func ElemSize(e Encoding) int {
	switch e {
	case Encoding_ENCODING_FLOAT32:
		return 4
	case Encoding_ENCODING_FLOAT16:
		return 2
	case Encoding_ENCODING_INT8:
		return 1
	}
	return 0
}

// EncodeVector packs v in encoding enc. scale is the int8 scale (0 for the
// other encodings).
func EncodeVector(v []float32, enc Encoding) (data []byte, scale float32, err error) {
	switch enc {
	case Encoding_ENCODING_FLOAT32:
		data = make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
		}
		return data, 0, nil
	case Encoding_ENCODING_FLOAT16:
		data = make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(data[2*i:], Float16Bits(x))
		}
		return data, 0, nil
	case Encoding_ENCODING_INT8:
		var maxAbs float64
		for i, x := range v {
			a := math.Abs(float64(x))
			if math.IsNaN(a) || math.IsInf(a, 0) {
				return nil, 0, fmt.Errorf("record: int8 encoding: element %d is %v", i, x)
			}
			maxAbs = max(maxAbs, a)
		}
		data = make([]byte, len(v))
		if maxAbs == 0 {
			return data, 0, nil
		}
		s := maxAbs / 127
		for i, x := range v {
			q := math.Round(float64(x) / s)
			q = min(max(q, -127), 127)
			data[i] = byte(int8(q))
		}
		return data, float32(s), nil
	}
	return nil, 0, fmt.Errorf("record: encoding %v is not supported", enc)
}

// DecodeVector unpacks dims elements from data in encoding enc.
func DecodeVector(data []byte, dims int, enc Encoding, scale float32) ([]float32, error) {
	es := ElemSize(enc)
	if es == 0 {
		return nil, fmt.Errorf("%w: embedding encoding %v is not supported", ErrCorrupt, enc)
	}
	if dims < 0 || len(data) != dims*es {
		return nil, fmt.Errorf("%w: embedding of %d bytes does not hold %d %s elements", ErrCorrupt, len(data), dims, enc.Short())
	}
	v := make([]float32, dims)
	switch enc {
	case Encoding_ENCODING_FLOAT32:
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case Encoding_ENCODING_FLOAT16:
		for i := range v {
			v[i] = Float16From(binary.LittleEndian.Uint16(data[2*i:]))
		}
	case Encoding_ENCODING_INT8:
		for i := range v {
			v[i] = float32(int8(data[i])) * scale
		}
	}
	return v, nil
}

// SetVector packs v into the chunk's embedding, dims, encoding and scale.
func (c *Chunk) SetVector(v []float32, enc Encoding) error {
	data, scale, err := EncodeVector(v, enc)
	if err != nil {
		return fmt.Errorf("record: chunk %d: %w", c.GetChunkNo(), err)
	}
	c.Embedding, c.Dims, c.Encoding, c.Scale = data, int32(len(v)), enc, scale
	return nil
}

// Vector unpacks the chunk's embedding (nil when it has none).
func (c *Chunk) Vector() ([]float32, error) {
	if c.GetDims() == 0 && len(c.GetEmbedding()) == 0 {
		return nil, nil
	}
	v, err := DecodeVector(c.GetEmbedding(), int(c.GetDims()), c.GetEncoding(), c.GetScale())
	if err != nil {
		return nil, fmt.Errorf("record: chunk %d: %w", c.GetChunkNo(), err)
	}
	return v, nil
}

// Check validates a record: a URL is present and every chunk's embedding
// matches its dims and encoding.
func Check(p *PreparedPage) error {
	if p == nil {
		return fmt.Errorf("%w: nil record", ErrCorrupt)
	}
	if p.GetUrl() == "" {
		return fmt.Errorf("%w: record has no url", ErrCorrupt)
	}
	for i, c := range p.GetChunks() {
		if c.GetDims() < 0 {
			return fmt.Errorf("%w: %s: chunk %d (#%d): dims %d", ErrCorrupt, p.GetUrl(), c.GetChunkNo(), i, c.GetDims())
		}
		if c.GetDims() == 0 && len(c.GetEmbedding()) == 0 {
			continue
		}
		es := ElemSize(c.GetEncoding())
		if es == 0 {
			return fmt.Errorf("%w: %s: chunk %d: encoding %v", ErrCorrupt, p.GetUrl(), c.GetChunkNo(), c.GetEncoding())
		}
		if len(c.GetEmbedding()) != int(c.GetDims())*es {
			return fmt.Errorf("%w: %s: chunk %d: embedding of %d bytes, want %d × %s", ErrCorrupt, p.GetUrl(), c.GetChunkNo(), len(c.GetEmbedding()), c.GetDims(), c.GetEncoding().Short())
		}
	}
	return nil
}

var marshalOpts = proto.MarshalOptions{Deterministic: true}

// Marshal checks and encodes a record deterministically.
func Marshal(p *PreparedPage) ([]byte, error) {
	if err := Check(p); err != nil {
		return nil, err
	}
	b, err := marshalOpts.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("record: marshal %s: %w", p.GetUrl(), err)
	}
	return b, nil
}

// Unmarshal decodes and checks a record. Errors wrap ErrCorrupt.
func Unmarshal(b []byte) (*PreparedPage, error) {
	var p PreparedPage
	if err := proto.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%w: %d bytes: %v", ErrCorrupt, len(b), err)
	}
	if err := Check(&p); err != nil {
		return nil, err
	}
	return &p, nil
}
