//go:build race

package handlerstest

import "time"

// Under the race detector the stores' test servers are several times slower (see mongostore's
// testTimeout, up to a minute per query): a request waits for the store's answer, 503 or not.
func init() { clientTimeout = 3 * time.Minute }
