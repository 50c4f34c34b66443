// n8n-node/ is a TypeScript package (n8n-nodes-companion), not Go. This file only makes it a
// module of its own, so `go vet ./...` and `go test ./...` at the repository root never walk
// n8n-node/node_modules (some npm packages ship .go files, e.g. flatted/golang).
module github.com/replaysafe/companion/n8n-node

go 1.26
