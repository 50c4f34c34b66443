//go:build !unix

package sqlitestore

import "time"

// cpuTime is not measured without getrusage: BenchmarkItemCache's cpu-µs/item reads 0 there.
func cpuTime() time.Duration { return 0 }
