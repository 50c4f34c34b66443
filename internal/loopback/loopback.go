// Package loopback says whether a host name stays on this machine: the listener's check (serve binds
// loopback only without tokens), the Host allow-list and the console's origins share it.
package loopback

import (
	"net"
	"strings"
)

// Name reports whether name (a host without its port; an IPv6 literal with or without its brackets) is
// localhost or a loopback address: a name no web page can take over, since this machine resolves it.
func Name(name string) bool {
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}
