// Package typo finds the name a mistyped one most likely meant, for the "did you mean" of every place that
// refuses an unknown name: a request body's member, a configuration file's key, a command or a flag.
package typo

import "strings"

// Nearest returns the name of known closest to name (compared in lower case) by edit distance, if it is
// close enough to be a typo of it: fewer than within edits apart, and the closest such (the first on a
// tie); else "". Within returns the usual bound.
func Nearest(name string, known []string, within int) string {
	lower := strings.ToLower(name)
	best, bestDist := "", within
	for _, k := range known {
		if d := Distance(lower, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// Within is the usual bound for Nearest: a typo of name changes at most a third of its letters, and at
// least one may be changed.
func Within(name string) int { return max(1, len(name)/3) + 1 }

// Distance is the Levenshtein distance between a and b, in bytes (the names are ASCII).
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
