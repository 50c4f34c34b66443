//go:build race

package mongostore_test

func init() { raceEnabled = true }
