//go:build race

package mongotest

func init() { raceEnabled = true }
