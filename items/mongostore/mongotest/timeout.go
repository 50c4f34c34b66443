package mongotest

import "time"

// raceEnabled is set when the tests run under the race detector (race.go).
var raceEnabled bool

// StoreTimeout is the store timeout (mongostore.WithTimeout) for tests' stores on this server. FerretDB in
// the test's process, on SQLite, is slow: counting or paging a 600-item batch takes it 0.5-4 s on a
// shared 2-core machine, and the race detector, which instruments FerretDB too, makes every query
// several times slower again. Tests check what the store answers, not how fast, so they give it a
// timeout that scales: 15 s, 60 s under -race. Tests of timeouts and outages set their own.
func StoreTimeout() time.Duration {
	if raceEnabled {
		return 60 * time.Second
	}
	return 15 * time.Second
}

// RaceDetector reports whether the tests run under the race detector, which makes FerretDB several times
// slower: a test whose size is its point (a batch of 500 items) may run a smaller size then.
func RaceDetector() bool { return raceEnabled }
