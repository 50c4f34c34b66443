package probes

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

// FuzzExpand holds the placeholder expansion of a lookup URL to its promise, for any URL template the
// configuration accepts and any values: the read goes to the template's scheme and host, and its path
// stays under the template's fixed part (what comes before its first placeholder), whether the destination
// resolves the dot segments of the path as it gets it, or after decoding it once more. A value that would
// leave it is refused (lookup_bad_reference), and no URL is made.
//
// Run: go test ./probes -run '^$' -fuzz '^FuzzExpand$' -fuzztime 2m
func FuzzExpand(f *testing.F) {
	for _, s := range []struct{ path, reference, key string }{
		{"/v1/customers/{reference}/orders", "QT-742", "inv:7+x"},
		{"/v1/customers/{reference}/orders", "..", "k"},
		{"/v1/customers/{reference}", "%2e%2e", "k"},
		{"/v1/customers/{reference}", "%252e%252e%252f", "k"},
		{"/a/b{reference}c/{key}", "./..", ".."},
		{"/x/../y/{reference}?q={key}", `..\..`, "a/b"},
		{"/search?q={reference}&k={key}", "../../admin", "%2F"},
		{"/{reference}", "\x00..", "k"},
		{"/items/{key}", "r", "a%2F..%2F"},
		{"/%2e%2e/{reference}", "é/../", "k"},
	} {
		f.Add(s.path, s.reference, s.key)
	}
	f.Fuzz(func(t *testing.T, tmplPath, reference, key string) {
		tmpl := "https://lookup.example" + tmplPath
		if checkTemplate(tmpl) != nil || !strings.HasPrefix(tmplPath, "/") {
			return
		}
		got, err := expand(tmpl, map[string]string{"{reference}": reference, "{key}": key, "{idempotency_key}": "ik_0123456789abcdef0123456789abcdef"})
		if err != nil {
			if !strings.HasPrefix(err.Error(), CodeBadReference+": ") {
				t.Fatalf("expand(%q) refused with %q, want a %s", tmpl, err, CodeBadReference)
			}
			return
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("expand(%q, %q, %q) = %q: not a URL: %v", tmpl, reference, key, got, err)
		}
		if u.Scheme != "https" || u.Host != "lookup.example" || u.User != nil {
			t.Fatalf("expand(%q, %q, %q) = %q leaves the template's host", tmpl, reference, key, got)
		}
		pathPart, _, _ := strings.Cut(tmplPath, "?")
		fixed, _, inPath := strings.Cut(pathPart, "{")
		if !inPath {
			return // no placeholder in the path: nothing a value could move
		}
		// The fixed part's directory, as the destination resolves it: the prefix every read must stay under.
		dir := fixed[:strings.LastIndex(fixed, "/")+1]
		for _, decodings := range []int{1, 2} {
			want, ok := resolved(dir, decodings)
			if !ok {
				return // the template's own path does not decode: nothing to compare
			}
			have, ok := resolved(u.EscapedPath(), decodings)
			if !ok {
				continue // a destination could not decode it either
			}
			if have != want && !strings.HasPrefix(have, strings.TrimSuffix(want, "/")+"/") {
				t.Fatalf("expand(%q, %q, %q) = %q: its path %q (decoded %d time(s)) leaves %q", tmpl, reference, key, got, have, decodings, want)
			}
		}
	})
}

// resolved is an escaped path as a server that decodes it n times and then removes its dot segments sees
// it; false when it does not decode.
func resolved(escaped string, n int) (string, bool) {
	p := escaped
	for range n {
		d, err := url.PathUnescape(p)
		if err != nil {
			return "", false
		}
		p = d
	}
	return path.Clean("/" + strings.ReplaceAll(p, `\`, "/")), true
}
