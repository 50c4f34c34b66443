package pgstore

// DocumentJSON returns the JSON a stored document holds (doc.go).
func DocumentJSON(doc []byte) ([]byte, error) { return expandDocument(nil, doc) }
