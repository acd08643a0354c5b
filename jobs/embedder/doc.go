// Package embedder turns chunk texts into vectors.
//
// An embedder (model version) is a named model with fixed parameters, parsed
// from a spec string by Parse:
//
//	hash:dim=384
//	openai:url=http://127.0.0.1:8000/v1,model=bge-small,dim=384,batch=64,concurrency=4
//
// Its ID is derived from the configuration that determines the vectors plus an
// algorithm version constant: the same configuration always has the same id.
// Ids look like "hash-d384-5d1c0a9e" or "openai-bge-small-d384-0c1d2e3f" and
// are safe as a table path component (embeddings/<cv>/<id>). No API key is
// ever part of an id, a spec, an error or a log line.
//
// # Guarantees
//
//   - Embed returns exactly one vector per text, in input order, each of
//     Dims() finite float32 values; otherwise it returns an error and no
//     vectors. A vector the model got wrong (NaN, ±Inf, wrong length) is a
//     *VectorError (errors.Is(err, ErrBadVector)) whose Index is the text's
//     position in the Embed call, so the caller can name the page and chunk.
//   - Embedders are safe for concurrent use; Embed may be called from many
//     goroutines.
//   - An empty texts slice returns no vectors and sends nothing.
//
// # hash
//
// A real embedding that needs no model: feature hashing of word unigrams and
// bigrams with signed hashing, sub-linear term frequency and L2
// normalisation. It is the embedded default. Its one parameter is dim (1 to
// 65536, default 384: "hash" is "hash:dim=384"). Exactly, for dimension D:
//
//  1. Tokenize the text with chunker.Tokenize (documented in package
//     chunker) and keep the Word and Ideograph tokens, in order: w₁ … wₙ.
//     Punctuation tokens are dropped (a bigram may span them).
//  2. Lower-case each word rune by rune with unicode.ToLower, as UTF-8 bytes.
//     No Unicode normalisation is applied: normalise (NFC) upstream if the
//     corpus mixes composed and decomposed forms.
//  3. The features are the unigrams wᵢ (the bytes of the word) and the
//     bigrams wᵢ₋₁ wᵢ (the bytes of the first word, one space 0x20, the bytes
//     of the second), for i = 2 … n.
//  4. Each feature's hash is h = fmix64(FNV-1a-64(bytes)), where FNV-1a-64
//     has offset basis 14695981039346656037 and prime 1099511628211, and
//     fmix64 is MurmurHash3's finalizer (h ^= h>>33; h *= 0xff51afd7ed558ccd;
//     h ^= h>>33; h *= 0xc4ceb9fe1a85ec53; h ^= h>>33). Features are
//     identified by h: tf is the number of features with that h.
//  5. For every distinct h: bucket = uint32(h) mod D (the low 32 bits),
//     sign = −1 if bit 63 of h is set else +1, weight = 1 + ln(tf);
//     v[bucket] += sign·weight, summed in float64 in the order in which the
//     features first occur in the text (unigram wᵢ before bigram wᵢ₋₁ wᵢ).
//  6. v is divided by its L2 norm and rounded to float32. A text without
//     words has the zero vector.
//
// The result is deterministic across machines and Go releases (up to the
// Unicode tables, as for the tokenizer). Texts that share words and phrases
// have a high cosine; unrelated texts a cosine near 0.
//
// # openai
//
// A client of the OpenAI-compatible embeddings API (POST <url>/embeddings,
// body {"model", "input": [...], "encoding_format": "float"}) that vLLM,
// text-embeddings-inference, Ollama, LiteLLM and OpenAI serve. Parameters:
//
//	url          base URL, e.g. http://127.0.0.1:8000/v1 ("/embeddings" is
//	             appended unless the URL ends in it); required
//	model        the model name the server knows; required
//	dim          the vector length the model returns; required
//	batch        inputs per request; default 64
//	concurrency  requests in flight at once, across all Embed calls of
//	             every embedder of the same spec in the process (a job
//	             runner's mappers share it; a retry's wait holds its
//	             slot); default 4
//	rate         most requests started per second, retries included (a
//	             provider's rate limit), shared as concurrency is; a
//	             token bucket of concurrency
//	             tokens, so a burst of up to concurrency goes at once and
//	             over any stretch t at most concurrency + rate × t start;
//	             default no limit
//	timeout      limit per attempt (connect, send, answer, read); default 1m
//	retries      further attempts after a failed one; default 5
//	backoff      first retry wait, doubled per retry up to 30s, with jitter
//	             between half and all of it; default 500ms
//	key_env      the one variable name to take the API key from; by default
//	             PILLAR_EMBED_API_KEY, then OPENAI_API_KEY
//
// The id covers model and dim only: moving the server or tuning batch,
// concurrency, rate, timeout or retries keeps the version.
//
// The API key is looked up, for each name in order, in the secrets map given
// to Parse (a YTsaurus job passes its secure vault, e.g. from
// mapreduce.JobContext.LookupVault("PILLAR_EMBED_API_KEY")), then in the
// environment, then in YT_SECURE_VAULT_<name> (how YTsaurus exposes vault
// entries to a job's environment). No key, no Authorization header (a local
// vLLM needs none). The key is sent only as "Authorization: Bearer …".
//
// Retries: a connection error, a timeout, HTTP 408, 429 and any 5xx are
// retried; Retry-After (seconds or an HTTP date, at most 5m) replaces the
// backoff when present. Other statuses fail at once with a *StatusError that
// carries the server's message. A response is checked before any vector is
// used: it must hold exactly one embedding per input (matched by its "index"
// field, so order does not matter; ErrBadResponse when one is missing,
// doubled or out of range) and each embedding must have dim finite values
// (*VectorError otherwise; bare NaN/Infinity tokens, which Python servers
// write, are read so the input can be named). These are not retried: a model
// that answers NaN for a text does so again. Base64 embeddings are accepted
// too.
//
// To keep all concurrency slots busy, call Embed with batch × concurrency
// texts (PreferredBatch) or from several goroutines: the limit is shared.
// The pipeline's EmbedJob does the latter: up to Concurrency calls of
// BatchSize texts in flight while it reads the next chunks and writes the
// answered ones. WithConcurrency rewrites a spec's concurrency.
//
// The first batch of an Embed call that fails for good cancels the others;
// Embed returns the error of the earliest failed batch, which names the
// embedder id and the input range.
package embedder
