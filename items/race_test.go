//go:build race

package items_test

// The race detector makes sync.Pool drop objects at random, so json.Valid's pooled scanner allocates
// now and then; allocation counts mean nothing under it.
func init() { raceEnabled = true }
