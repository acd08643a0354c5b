package rocks

import (
	"fmt"

	"github.com/linxGnu/grocksdb"
)

// TableConfig is the block-based table layout of every SST in the toolkit.
type TableConfig struct {
	// BlockSize in bytes. The default value is 16 KiB: values average ~50 KB,
	// so larger blocks cost little and keep the index small.
	BlockSize int
	// BloomBitsPerKey for the whole-key bloom filter. The default value is 10
	// (about 1% false positives).
	BloomBitsPerKey float64
	// Compression is "zstd", "lz4" or "none". The default value is "lz4":
	// cheap to decode on the read path.
	Compression string
}

func (c *TableConfig) ensureDefaults() {
	if c.BlockSize == 0 {
		c.BlockSize = 16 << 10
	}
	if c.BloomBitsPerKey == 0 {
		c.BloomBitsPerKey = 10
	}
	if c.Compression == "" {
		c.Compression = "lz4"
	}
}

// Validate checks the config.
func (c TableConfig) Validate() error {
	c.ensureDefaults()
	if c.BlockSize < 1024 || c.BlockSize > 4<<20 {
		return fmt.Errorf("rocks: block size %d out of range [1KiB,4MiB]", c.BlockSize)
	}
	if _, err := compression(c.Compression); err != nil {
		return err
	}
	return nil
}

func compression(name string) (grocksdb.CompressionType, error) {
	switch name {
	case "lz4":
		return grocksdb.LZ4Compression, nil
	case "zstd":
		return grocksdb.ZSTDCompression, nil
	case "none":
		return grocksdb.NoCompression, nil
	}
	return 0, fmt.Errorf("rocks: compression %q: want zstd, lz4 or none", name)
}

// BlockBasedTableOptions returns table options for the config. cache may be
// nil (no block cache, as for a writer). Index and filter blocks live in the
// cache and are pinned for L0, which is where ingested files land first.
func (c TableConfig) BlockBasedTableOptions(cache *grocksdb.Cache) *grocksdb.BlockBasedTableOptions {
	c.ensureDefaults()
	bbto := grocksdb.NewDefaultBlockBasedTableOptions()
	bbto.SetBlockSize(c.BlockSize)
	bbto.SetFilterPolicy(grocksdb.NewBloomFilter(c.BloomBitsPerKey))
	bbto.SetWholeKeyFiltering(true)
	bbto.SetFormatVersion(5)
	if cache != nil {
		bbto.SetBlockCache(cache)
		bbto.SetCacheIndexAndFilterBlocks(true)
		bbto.SetPinL0FilterAndIndexBlocksInCache(true)
	} else {
		bbto.SetNoBlockCache(true)
	}
	return bbto
}

// Options returns database (or SST writer) options using the table layout.
// The caller destroys the returned options.
func (c TableConfig) Options(cache *grocksdb.Cache) (*grocksdb.Options, error) {
	c.ensureDefaults()
	comp, err := compression(c.Compression)
	if err != nil {
		return nil, err
	}
	opts := grocksdb.NewDefaultOptions()
	// The C API copies the table options into a new table factory (the
	// filter policy and cache are shared pointers), so the Go-side object is
	// freed here rather than leaked: Options.Destroy does not free it.
	bbto := c.BlockBasedTableOptions(cache)
	opts.SetBlockBasedTableFactory(bbto)
	bbto.Destroy()
	opts.SetCompression(comp)
	opts.SetBottommostCompression(comp)
	return opts, nil
}
