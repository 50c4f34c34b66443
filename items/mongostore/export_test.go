package mongostore

import "go.mongodb.org/mongo-driver/v2/event"

// WithCommandMonitor lets a test see every command the store's client sends.
func WithCommandMonitor(m *event.CommandMonitor) Option {
	return func(s *settings) { s.monitor = m }
}
