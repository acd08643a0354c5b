// Package bytesize parses the byte sizes of every size flag of the pillar
// command (--cache, --memory-limit, --block-size, --target-file-size,
// --max-value-size, --max-response, --item-size, bench --sizes), so that one
// spelling means one number everywhere.
//
// Invariants:
//   - A size is a non-negative decimal number (fractions allowed: "1.5GiB")
//     with an optional unit, in any letter case, with optional spaces between.
//   - IEC units are powers of 1024: KiB, MiB, GiB, TiB, PiB.
//   - SI units with a B are powers of 1000: KB, MB, GB, TB, PB ("2MB" is
//     2,000,000 bytes), as disks and object stores count.
//   - A bare letter is IEC: K, M, G, T, P ("2M" is 2 MiB), as sort -S, Docker
//     and the JVM read it; B or no unit is bytes.
//   - A fraction is rounded down to whole bytes; a result beyond int64 is an
//     error, never a wrap-around.
//   - Errors quote the value and list the accepted units; [ParseFlag] also
//     names the flag.
package bytesize
