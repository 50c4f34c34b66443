//go:build race

package acceptance_test

func init() { raceDetector = true }
