package handlers

import (
	_ "embed" // the contract document is embedded
)

// openAPIDocument is the HTTP contract (docs/api.md) as an OpenAPI 3 document, served at
// GET /openapi.json. It is written by hand next to the handlers it describes; a test validates it with an
// OpenAPI library and checks that it names every route the service serves and that real answers match it.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the contract as an OpenAPI 3 JSON document.
func OpenAPI() []byte { return append([]byte(nil), openAPIDocument...) }
