package blueprints

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// The Make modules and versions the blueprints use, as Make's own exported blueprints name them
// (/work/shared/reference/make-blueprints). A test checks every rendered module is one of these.
var MakeModuleVersions = map[string]int{
	"gateway:CustomWebHook":   1,
	"gateway:WebhookRespond":  1,
	"http:MakeRequest":        4,
	"builtin:BasicRouter":     1,
	"builtin:BasicFeeder":     1,
	"builtin:BasicAggregator": 1,
	"builtin:Ignore":          1,
	"util:ComposeTransformer": 1,
	"util:SetVariable2":       1,
	// JSON → Transform to JSON: serializes one value as JSON (a text becomes a quoted, escaped string,
	// a number stays a number). Not in the reference set; its name, version, parameters {"space": ""},
	// mapper {"object": …} and output {{N.json}} are from public exports (blueprints/README.md).
	"json:TransformToJSON": 1,
}

// MakeBlueprint is a Make scenario blueprint as Make exports and imports it.
type MakeBlueprint struct {
	Name        string       `json:"name"`
	Description string       `json:"description"`
	Flow        []MakeModule `json:"flow"`
	Metadata    MakeMetadata `json:"metadata"`
}

// MakeModule is one module of a flow, a route or an error handler.
type MakeModule struct {
	ID         int          `json:"id"`
	Module     string       `json:"module"`
	Version    int          `json:"version"`
	Parameters any          `json:"parameters,omitempty"`
	Filter     *MakeFilter  `json:"filter,omitempty"`
	Mapper     any          `json:"mapper,omitempty"`
	Metadata   MakeModMeta  `json:"metadata"`
	Routes     []MakeRoute  `json:"routes,omitempty"`
	OnError    []MakeModule `json:"onerror,omitempty"`
}

// MakeRoute is one route of a router.
type MakeRoute struct {
	Flow []MakeModule `json:"flow"`
}

// MakeFilter lets a bundle through when any AND-group of conditions holds.
type MakeFilter struct {
	Name       string            `json:"name"`
	Conditions [][]MakeCondition `json:"conditions"`
}

// MakeCondition compares a mapping (a) with a value (b) using operator o (e.g. text:equal).
type MakeCondition struct {
	A string `json:"a"`
	O string `json:"o"`
	B string `json:"b,omitempty"`
}

// MakeModMeta holds a module's designer position and label.
type MakeModMeta struct {
	Designer MakeDesigner `json:"designer"`
}

// MakeDesigner places a module on the canvas and names it.
type MakeDesigner struct {
	X    int    `json:"x"`
	Y    int    `json:"y"`
	Name string `json:"name,omitempty"`
}

// MakeMetadata holds the scenario settings.
type MakeMetadata struct {
	Instant  bool         `json:"instant"`
	Version  int          `json:"version"`
	Scenario MakeScenario `json:"scenario"`
	Designer MakeOrphans  `json:"designer"`
}

// MakeOrphans is the designer's list of unconnected modules (always empty here).
type MakeOrphans struct {
	Orphans []MakeModule `json:"orphans"`
}

// MakeScenario are the scenario settings. Sequential is on: one run at a time keeps a duplicate
// delivery from racing its original inside Make too. dlq keeps incomplete executions.
type MakeScenario struct {
	Roundtrips            int  `json:"roundtrips"`
	MaxErrors             int  `json:"maxErrors"`
	AutoCommit            bool `json:"autoCommit"`
	AutoCommitTriggerLast bool `json:"autoCommitTriggerLast"`
	Sequential            bool `json:"sequential"`
	Confidential          bool `json:"confidential"`
	Dataloss              bool `json:"dataloss"`
	DLQ                   bool `json:"dlq"`
	FreshVariables        bool `json:"freshVariables"`
}

// MakeHTTPMapper is the mapper of http:MakeRequest v4.
type MakeHTTPMapper struct {
	URL                      string       `json:"url"`
	Method                   string       `json:"method"`
	Headers                  []MakeHeader `json:"headers"`
	QueryParameters          []MakeHeader `json:"queryParameters"`
	ContentType              string       `json:"contentType,omitempty"`
	InputMethod              string       `json:"inputMethod,omitempty"`
	JSONStringBodyContent    string       `json:"jsonStringBodyContent,omitempty"`
	ParseResponse            bool         `json:"parseResponse"`
	StopOnHTTPError          bool         `json:"stopOnHttpError"`
	AllowRedirects           bool         `json:"allowRedirects"`
	ShareCookies             bool         `json:"shareCookies"`
	RequestCompressedContent bool         `json:"requestCompressedContent"`
	Timeout                  int          `json:"timeout,omitempty"`
}

// MakeHeader is a header or query parameter of http:MakeRequest.
type MakeHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// makeFlow allocates module ids in the order modules are created. url and token are the ids of the
// Settings modules every companion call maps its URL and token from.
type makeFlow struct {
	next       int
	s          Settings
	url, token int
}

// The names of the two Settings variables, as the companion calls map them ({{N.companion_url}}).
const (
	MakeURLVariable   = "companion_url"
	MakeTokenVariable = "companion_token"
)

// settings renders the one place a builder sets companion's URL and token: two Set variable modules
// right after the trigger (Make's util:SetVariable2, as in Make's own webhook-router-error-handler
// pattern). Every companion call maps from them, so the token is typed once, not pasted into every
// Authorization header; they run before any feeder, so their values stay mappable after an aggregator.
func (f *makeFlow) settings(x, y int) []MakeModule {
	set := func(name, variable, value string, x int) MakeModule {
		m := f.module(name, "util:SetVariable2", x, y)
		m.Parameters = map[string]string{}
		m.Mapper = map[string]string{"name": variable, "scope": "execution", "value": value}
		return m
	}
	u := set("Settings: companion URL", MakeURLVariable, f.s.ServiceURL, x)
	t := set("Settings: companion token", MakeTokenVariable, f.s.Token, x+150)
	f.url, f.token = u.ID, t.ID
	return []MakeModule{u, t}
}

func (f *makeFlow) module(name, module string, x, y int) MakeModule {
	f.next++
	return MakeModule{ID: f.next, Module: module, Version: MakeModuleVersions[module], Metadata: MakeModMeta{Designer: MakeDesigner{X: x, Y: y, Name: name}}}
}

func ref(id int, field string) string { return fmt.Sprintf("{{%d.%s}}", id, field) }

func equal(name string, a, b string) *MakeFilter {
	return &MakeFilter{Name: name, Conditions: [][]MakeCondition{{{A: a, O: "text:equal", B: b}}}}
}

// http builds an http:MakeRequest. stopOnHTTPError: the companion calls stop the run on a non-2xx
// answer (nothing is written without a claim); the write keeps every status as data.
func (f *makeFlow) http(name, method, url, body string, stopOnHTTPError bool, x, y int) MakeModule {
	m := f.module(name, "http:MakeRequest", x, y)
	m.Parameters = map[string]string{"authenticationType": "noAuth"}
	mp := MakeHTTPMapper{
		URL: url, Method: method,
		Headers:         []MakeHeader{},
		QueryParameters: []MakeHeader{},
		ParseResponse:   true, StopOnHTTPError: stopOnHTTPError, AllowRedirects: false,
	}
	if body != "" {
		mp.ContentType, mp.InputMethod, mp.JSONStringBodyContent = "json", "jsonString", body
	}
	m.Mapper = mp
	return m
}

// companion is a call to companion: URL and token mapped from the Settings modules.
func (f *makeFlow) companion(name, path, body string, x, y int) MakeModule {
	m := f.http(name, "post", ref(f.url, MakeURLVariable)+path, body, true, x, y)
	mp := m.Mapper.(MakeHTTPMapper)
	mp.Headers = []MakeHeader{{Name: "Authorization", Value: "Bearer " + ref(f.token, MakeTokenVariable)}}
	m.Mapper = mp
	return m
}

// claim is a companion before-write (single or batch) that keeps every status as data
// (stopOnHttpError off): a 200 is the decision to route on, and anything else is companion refusing the
// request, which the scenario answers with companion's status and words (claimRefused). With the option
// on, as before 2026-12-01, a refused claim stopped the run with an error: the sender got Make's own
// failure instead of companion's words, and with Sequential processing and incomplete executions on the
// stored run held up every later delivery until a person resolved it.
func (f *makeFlow) claim(name, path, body string, x, y int) MakeModule {
	m := f.companion(name, path, body, x, y)
	mp := m.Mapper.(MakeHTTPMapper)
	mp.StopOnHTTPError = false
	m.Mapper = mp
	return m
}

// refusedStatus is the webhook's answer to a claim companion refused for good (module c's status, any
// but 200 and 503, which claimRefused answers on its own route), as the n8n templates answer it: a content
// companion refuses is answered with its own status (400, 413; a redelivery of the same body cannot help),
// anything else (401, 403: the token or role; an answer the template does not know) 500.
func refusedStatus(c int) string {
	return fmt.Sprintf(`{{if(%d.statusCode = 400; 400; if(%d.statusCode = 413; 413; 500))}}`, c, c)
}

// claimRefused is the route a claim (module c) takes when companion answered anything but 200: the
// webhook is answered with companion's status, error word, message and fields, and nothing was claimed
// (API.md: nothing is written when a request is refused). named is the body's member naming what was
// asked about (`"key": {{5.json}}`; the batch lists its items' keys), what names it in the message (Make
// text with mappings). then adds modules after each answer (the trigger claim's report), once per answer
// route.
func (f *makeFlow) claimRefused(c int, named, what string, x, y int, then func(x, y int) []MakeModule) []MakeModule {
	word := f.toJSON("JSON: companion's error word", fmt.Sprintf(`{{ifempty(%d.data.error.code; "companion_error")}}`, c), x, y)
	word.Filter = &MakeFilter{Name: "companion refused the claim", Conditions: [][]MakeCondition{{{A: ref(c, "statusCode"), O: "number:notequal", B: "200"}}}}
	msg := f.toJSON("JSON: companion's message", fmt.Sprintf(`companion refused the claim of %s (HTTP {{%d.statusCode}}): {{ifempty(%d.data.error.message; "no message")}}; nothing was claimed or written`, what, c, c), x+150, y)
	fields := f.toJSON("JSON: fields companion named", ref(c, "data.error.fields"), x+300, y)
	body := func(status string) string {
		return fmt.Sprintf(`{%s, "status": %s, "error": %s, "message": %s, "fields": %s}`, named, status, jsonOf(word.ID), jsonOf(msg.ID), jsonOrNull(fields.ID))
	}
	later := f.respondLater("Answer: companion could not record the claim", "503", retryAfterSeconds(c, "60"), body("503"), x+600, y-150)
	later.Filter = &MakeFilter{Name: "503: deliver again later", Conditions: [][]MakeCondition{{{A: ref(c, "statusCode"), O: "number:equal", B: "503"}}}}
	refused := f.respond("Answer: claim refused", refusedStatus(c), body(refusedStatus(c)), x+600, y+150)
	refused.Filter = &MakeFilter{Name: "refused", Conditions: [][]MakeCondition{{{A: ref(c, "statusCode"), O: "number:notequal", B: "503"}}}}
	if then == nil {
		then = func(int, int) []MakeModule { return nil }
	}
	r := f.router("Claim refused", x+450, y, append([]MakeModule{later}, then(x+750, y-150)...), append([]MakeModule{refused}, then(x+750, y+150)...))
	return []MakeModule{word, msg, fields, r}
}

// claimUnreachable is the error handler of a claim (module c): companion was not reached or did not
// answer (a refused connection, DNS, a timeout). The webhook is answered 503 with Retry-After 60 so the
// sender delivers again, and the run ends with Ignore: without the handler the run stopped with an
// error, the sender got Make's own failure, and Make kept the run as an incomplete execution that, with
// Sequential processing on, held up the scenario. Nothing was written; a claim companion recorded before
// the connection broke is answered in_progress until its lease ends.
func (f *makeFlow) claimUnreachable(c int, named, what string, x, y int) []MakeModule {
	msg := f.toJSON("JSON: why companion was not reached", fmt.Sprintf(`companion was not reached for the claim of %s: Make {{%d.error.type}}: {{%d.error.message}}; nothing was written, deliver again later`, what, c, c), x, y)
	ans := f.respondLater("Answer: companion unreachable", "503", "60", fmt.Sprintf(`{%s, "status": 503, "error": "companion_unreachable", "message": %s}`, named, jsonOf(msg.ID)), x+150, y)
	return []MakeModule{msg, ans, f.module("End the run here", "builtin:Ignore", x+300, y)}
}

func (f *makeFlow) router(name string, x, y int, routes ...[]MakeModule) MakeModule {
	m := f.module(name, "builtin:BasicRouter", x, y)
	m.Mapper = json.RawMessage("null")
	for _, r := range routes {
		m.Routes = append(m.Routes, MakeRoute{Flow: r})
	}
	return m
}

// transportExpr classifies a Make error message with the shared TransportErrors table: nested
// if(contains(…)) giving the class, or the after-write outcome when outcome is true.
func transportExpr(id int, outcome bool) string {
	expr := `"other"`
	if outcome {
		expr = `"unknown"`
	}
	for i := len(TransportErrors) - 1; i >= 0; i-- {
		e := TransportErrors[i]
		v := `"` + e.Class + `"`
		if outcome {
			v = `"unknown"`
			if !e.Dispatched {
				v = `"failed"`
			}
		}
		expr = fmt.Sprintf(`if(contains(%d.error.message; "%s"); %s; %s)`, id, e.Code, v, expr)
	}
	return "{{" + expr + "}}"
}

// transportCodeExpr names the transport code found in a Make error message (ECONNREFUSED, …), else
// make_error. Like transportExpr it can only give one of its own words, so it may stand inside a JSON
// string; the message itself goes through a json:TransformToJSON module.
func transportCodeExpr(id int) string {
	expr := `"make_error"`
	for i := len(TransportErrors) - 1; i >= 0; i-- {
		e := TransportErrors[i]
		expr = fmt.Sprintf(`if(contains(%d.error.message; "%s"); "%s"; %s)`, id, e.Code, e.Code, expr)
	}
	return "{{" + expr + "}}"
}

// toJSON is a JSON → Transform to JSON module (json:TransformToJSON) serializing object: a mapping, or
// a text with mappings. Its output {{N.json}} is the value as JSON: a text quoted and escaped, a number
// as it is. A JSON body maps it bare ("key": {{N.json}}), so a quote, a newline or a backslash in the
// value cannot break the body; no body pastes a value between quotes.
func (f *makeFlow) toJSON(name, object string, x, y int) MakeModule {
	m := f.module(name, "json:TransformToJSON", x, y)
	m.Parameters = map[string]string{"space": ""}
	m.Mapper = map[string]string{"object": object}
	return m
}

// jsonOf maps module id's JSON output bare, for a value the run has checked is there.
func jsonOf(id int) string { return fmt.Sprintf("{{%d.json}}", id) }

// jsonOrNull maps module id's JSON output bare, or null when the value was empty (an answer without an
// id or a header): whether Make gives "" or nothing for an empty value, the body stays JSON.
func jsonOrNull(id int) string { return fmt.Sprintf(`{{ifempty(%d.json; "null")}}`, id) }

// makeValues are the JSON bodies' values taken from a delivery, each the bare mapping of a
// json:TransformToJSON module's output.
type makeValues struct {
	key, ref, trigKey string
	fields            []payloadField // the payload's fields, in the example's order
}

type payloadField struct{ name, json string }

// payload is the payload object built from its fields' JSON.
func (v makeValues) payload() string {
	parts := make([]string, len(v.fields))
	for i, p := range v.fields {
		parts[i] = fmt.Sprintf(`"%s": %s`, p.name, p.json)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

var (
	payloadFieldRE = regexp.MustCompile(`"(\w+)": "?\{\{1\.(\w+)\}\}"?`)
	deliveredRE    = regexp.MustCompile(`\{\{1\.(\w+)\}\}`)
)

// deliveryFields are the delivered fields the key, the reference and the payload are built from.
func deliveryFields(ex Example) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range deliveredRE.FindAllStringSubmatch(ex.KeyMake+ex.RefMake+ex.PayloadMake, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, m[1])
		}
	}
	return out
}

// deliveryJSON renders one json:TransformToJSON module per value the JSON bodies take from the
// delivery (module src's fields): the key, the trigger claim's key (with trigger), the reference and
// each payload field. A value used twice (the quote's reference is also a payload field) is
// serialized once.
func (f *makeFlow) deliveryJSON(ex Example, src int, trigger bool, x, y int) ([]MakeModule, makeValues) {
	var mods []MakeModule
	byObject := map[string]string{}
	add := func(name, object string) string {
		object = strings.ReplaceAll(object, "{{1.", fmt.Sprintf("{{%d.", src))
		if j, ok := byObject[object]; ok {
			return j
		}
		m := f.toJSON("JSON: "+name, object, x+150*len(mods), y)
		mods = append(mods, m)
		byObject[object] = jsonOf(m.ID)
		return jsonOf(m.ID)
	}
	var v makeValues
	v.key = add("key", ex.KeyMake)
	if trigger {
		v.trigKey = add("trigger key", ex.KeyMake+":trigger")
	}
	v.ref = add("reference", ex.RefMake)
	for _, m := range payloadFieldRE.FindAllStringSubmatch(ex.PayloadMake, -1) {
		v.fields = append(v.fields, payloadField{m[1], add(m[2], "{{1."+m[2]+"}}")})
	}
	return mods, v
}

// present is a filter operand that is 0 when module src's field is missing, null or empty.
func present(src int, field string) string {
	return fmt.Sprintf(`{{length(toString(ifempty(%d.%s; "")))}}`, src, field)
}

// lacksExpr names field (" invoice") when module src's field is missing, null or empty, else gives "".
// It can only give its own words, so it may stand inside a JSON string.
func lacksExpr(src int, field string) string {
	return fmt.Sprintf(`{{if(length(toString(ifempty(%d.%s; ""))) = 0; " %s"; "")}}`, src, field, field)
}

// checkDelivery is the router that stops a delivery missing a field the key, the reference or the
// payload is built from, before any key is built: without it every malformed delivery would share one
// key (invoice-:reminder:2). Its first route (the rest of the scenario, from the first module of
// rest on) takes a complete delivery; its second answers 400 naming the missing fields, nothing claimed.
func (f *makeFlow) checkDelivery(ex Example, x, y int, rest func() []MakeModule) MakeModule {
	r := f.module("Check delivery", "builtin:BasicRouter", x, y)
	r.Mapper = json.RawMessage("null")
	fields := deliveryFields(ex)
	complete := &MakeFilter{Name: "delivery complete", Conditions: [][]MakeCondition{{}}}
	incomplete := &MakeFilter{Name: "a field is missing"}
	var lacks, quoted []string
	for _, fd := range fields {
		complete.Conditions[0] = append(complete.Conditions[0], MakeCondition{A: present(1, fd), O: "number:greater", B: "0"})
		incomplete.Conditions = append(incomplete.Conditions, []MakeCondition{{A: present(1, fd), O: "number:equal", B: "0"}})
		lacks = append(lacks, lacksExpr(1, fd))
		quoted = append(quoted, `"`+fd+`"`)
	}
	flow := rest()
	flow[0].Filter = complete
	refuse := f.respond("Answer: delivery incomplete", "400", fmt.Sprintf(`{"error": "missing_fields", "message": "the delivery lacks:%s; nothing was claimed", "required": [%s]}`,
		strings.Join(lacks, ""), strings.Join(quoted, ", ")), x+300, y+600)
	refuse.Filter = incomplete
	r.Routes = []MakeRoute{{Flow: flow}, {Flow: []MakeModule{refuse}}}
	return r
}

// writeModule is the slot: the user's write, with the claim's idempotency key.
func (f *makeFlow) writeModule(claimID int, filter *MakeFilter, body string, x, y int) MakeModule {
	m := f.http("YOUR WRITE: create the record", "post", f.s.WriteURL, body, false, x, y)
	mp := m.Mapper.(MakeHTTPMapper)
	mp.Headers = []MakeHeader{{Name: "Idempotency-Key", Value: ref(claimID, "data.idempotency_key")}}
	mp.Timeout = (f.s.WriteTimeoutMillis + 999) / 1000
	m.Mapper = mp
	m.Filter = filter
	return m
}

// writeBody is the example write's body: the payload plus the business reference, the same bytes
// on every attempt so a receiver that dedupes by key sees an identical repeat.
func writeBody(v makeValues) string {
	for _, p := range v.fields {
		if p.name == "reference" {
			return v.payload()
		}
	}
	return strings.TrimSuffix(v.payload(), "}") + `, "reference": ` + v.ref + "}"
}

func withBody(m MakeModule, body string) MakeModule {
	mp := m.Mapper.(MakeHTTPMapper)
	mp.ContentType, mp.InputMethod, mp.JSONStringBodyContent = "json", "jsonString", body
	m.Mapper = mp
	return m
}

// writeOut is what the evidence takes from write module w, each the bare mapping of a
// json:TransformToJSON module: its external id and request id (success route), its error message
// (error handler), or a stored external id (a skip).
type writeOut struct {
	w                         int
	extID, requestID, message string
}

// claimRef names the claim an after-write reports: mappings of the companion answer's key and claim
// (tokens API.md limits to [A-Za-z0-9._:@+=~-], so they may stand inside a JSON string).
type claimRef struct{ key, claim string }

func claimOf(c int) claimRef { return claimRef{ref(c, "data.key"), ref(c, "data.claim")} }

// evidence bodies for /v1/after-write, from the write's outputs o and the claim c.
func statusEvidence(c claimRef, o writeOut, succeeded bool) string {
	w := o.w
	if succeeded {
		return fmt.Sprintf(`{"key": "%s", "claim": "%s", "outcome": "succeeded", "http_status": %s, "external_id": %s, "receiver_request_id": %s}`,
			c.key, c.claim, ref(w, "statusCode"), o.extID, o.requestID)
	}
	// A 3xx (redirects are not followed) proves nothing: unknown. 4xx and 5xx are failed, and the service
	// decides what a 5xx means.
	return fmt.Sprintf(`{"key": "%s", "claim": "%s", "outcome": "{{if(%d.statusCode < 400; "unknown"; "failed")}}", "http_status": %s, "retry_after": %s, "error": {"class": "http", "code": "%s"}}`,
		c.key, c.claim, w, ref(w, "statusCode"), retryAfterSeconds(w, `"null"`), ref(w, "statusCode"))
}

// retryAfterSeconds is a formula giving module w's Retry-After answer header in whole seconds, as
// API.md wants retry_after: an HTTP-date (RFC 9110, always "GMT") becomes the seconds from now until
// then, rounded up and at least 0; any other value keeps only its digits (Make's replace with a regular
// expression), so seconds pass as they are and a malformed value ("soon") counts as no header; no header
// gives fallback (a formula value: "null" in quotes, the text null Make pastes into the body, or a
// number). The result is a bare JSON number or null, never a text, so a body maps it bare.
func retryAfterSeconds(w int, fallback string) string {
	h := fmt.Sprintf("%d.headers.`retry-after`", w)
	return fmt.Sprintf(`{{if(contains(ifempty(%s; ""); "GMT"); max(0; ceil(parseNumber(formatDate(parseDate(replace(%s; " GMT"; ""); "ddd, DD MMM YYYY HH:mm:ss"; "UTC"); "X"); ".") - parseNumber(formatDate(now; "X"); "."))); ifempty(replace(%s; /[^0-9]/g; ""); %s))}}`,
		h, h, h, fallback)
}

func transportEvidence(c claimRef, o writeOut) string {
	return fmt.Sprintf(`{"key": "%s", "claim": "%s", "outcome": "%s", "error": {"class": "%s", "code": "%s", "message": %s}}`,
		c.key, c.claim, transportExpr(o.w, true), transportExpr(o.w, false), transportCodeExpr(o.w), o.message)
}

// errorMessage serializes module w's error (Make's error type and message) for the evidence.
func (f *makeFlow) errorMessage(w int, x, y int) MakeModule {
	return f.toJSON("JSON: error message", fmt.Sprintf("Make {{%d.error.type}}: {{%d.error.message}}", w, w), x, y)
}

// writeTail renders write → status router → after-write, with the transport error handler.
// extra(kind) adds modules after each after-write (the trigger guard's report).
func (f *makeFlow) writeTail(claimID int, filter *MakeFilter, body string, x, y int, extra func(kind string, o writeOut, x, y int) []MakeModule) []MakeModule {
	w := f.writeModule(claimID, filter, body, x, y)
	msg := f.errorMessage(w.ID, x+150, y+300)
	eo := writeOut{w: w.ID, message: jsonOf(msg.ID)}
	onerr := []MakeModule{msg, withBody(f.companion("After-write: transport failure (never a blind retry)", PathAfterWrite, "", x+300, y+300), transportEvidence(claimOf(claimID), eo))}
	// The webhook's answer first, then the trigger claim's report: that report is filtered to runs that
	// hold the trigger claim, and a filtered-out module must not keep the answer from being sent.
	onerr = append(onerr, extra("answer transport", eo, x+600, y+300)...)
	onerr = append(onerr, extra("transport", eo, x+750, y+300)...)
	ign := f.module("End the item here", "builtin:Ignore", x+900, y+300)
	onerr = append(onerr, ign)
	w.OnError = onerr
	ext := f.toJSON("JSON: external id", ref(w.ID, "data.id"), x+450, y-300)
	ext.Filter = &MakeFilter{Name: "2xx", Conditions: [][]MakeCondition{{{A: ref(w.ID, "statusCode"), O: "number:less", B: "300"}}}}
	rid := f.toJSON("JSON: receiver request id", ref(w.ID, "headers.`x-request-id`"), x+600, y-300)
	so := writeOut{w: w.ID, extID: jsonOrNull(ext.ID), requestID: jsonOrNull(rid.ID)}
	ok := f.companion("After-write: succeeded", PathAfterWrite, "", x+600, y-150)
	ok = withBody(ok, statusEvidence(claimOf(claimID), so, true))
	okRoute := append([]MakeModule{ext, rid, ok}, extra("answer succeeded", so, x+900, y-150)...)
	okRoute = append(okRoute, extra("succeeded", so, x+1200, y-150)...)
	bo := writeOut{w: w.ID}
	bad := f.companion("After-write: HTTP failure", PathAfterWrite, "", x+600, y+150)
	bad = withBody(bad, statusEvidence(claimOf(claimID), bo, false))
	bad.Filter = &MakeFilter{Name: "not 2xx", Conditions: [][]MakeCondition{{{A: ref(w.ID, "statusCode"), O: "number:greaterorequal", B: "300"}}}}
	badRoute := append([]MakeModule{bad}, extra("answer failed", bo, x+900, y+150)...)
	badRoute = append(badRoute, extra("failed", bo, x+1200, y+150)...)
	r := f.router("Classify the answer", x+300, y, okRoute, badRoute)
	return []MakeModule{w, r}
}

func scenario() MakeMetadata {
	return MakeMetadata{
		Instant: true, Version: 1,
		Scenario: MakeScenario{Roundtrips: 1, MaxErrors: 3, AutoCommit: true, AutoCommitTriggerLast: true, Sequential: true, DLQ: true},
		Designer: MakeOrphans{Orphans: []MakeModule{}},
	}
}

func makeBeforeWriteBody(t Template, v makeValues) string {
	return fmt.Sprintf(`{"key": %s, "payload": %s, "destination": "%s", "dedupe": "%s", "reference": %s, "execution_id": "{{var.scenario.executionId}}"}`,
		v.key, v.payload(), t.Destination, t.Dedupe, v.ref)
}

// RenderMake renders one template as a Make blueprint.
func RenderMake(t Template, s Settings) MakeBlueprint {
	f := &makeFlow{s: s}
	var flow []MakeModule
	switch {
	case t.Shape == Batch:
		flow = f.batch(t)
	default:
		flow = f.single(t)
	}
	spread(flow)
	return MakeBlueprint{Name: t.Title, Description: t.Description, Flow: flow, Metadata: scenario()}
}

// spread moves a module placed where an earlier one already stands 150 down the canvas until its place
// is free, so that no module hides another in Make's designer.
func spread(flow []MakeModule) {
	taken := map[[2]int]bool{}
	var walk func(flow []MakeModule)
	walk = func(flow []MakeModule) {
		for i := range flow {
			d := &flow[i].Metadata.Designer
			for taken[[2]int{d.X, d.Y}] {
				d.Y += 150
			}
			taken[[2]int{d.X, d.Y}] = true
			for _, r := range flow[i].Routes {
				walk(r.Flow)
			}
			walk(flow[i].OnError)
		}
	}
	walk(flow)
}

func (f *makeFlow) respond(name, status, body string, x, y int) MakeModule {
	m := f.module(name, "gateway:WebhookRespond", x, y)
	m.Parameters = map[string]string{}
	m.Mapper = map[string]any{"status": status, "body": body, "headers": []map[string]string{{"key": "content-type", "value": "application/json"}}}
	return m
}

// respondLater answers so that the sender redelivers: status (a formula that may give 503) with a
// Retry-After of retryAfter seconds (a formula).
func (f *makeFlow) respondLater(name, status, retryAfter, body string, x, y int) MakeModule {
	m := f.respond(name, status, body, x, y)
	mp := m.Mapper.(map[string]any)
	mp["headers"] = []map[string]string{{"key": "content-type", "value": "application/json"}, {"key": "retry-after", "value": retryAfter}}
	return m
}

func (f *makeFlow) single(t Template) []MakeModule {
	hook := f.module("Trigger", "gateway:CustomWebHook", 0, 0)
	hook.Parameters = map[string]string{}
	hook.Mapper = map[string]string{}
	flow := append([]MakeModule{hook}, f.settings(150, 0)...)
	check := f.checkDelivery(t.Example, 450, 0, func() []MakeModule { return f.singleChecked(t, 600) })
	return append(flow, check)
}

// singleChecked is the single-item scenario after Check delivery, from x on.
func (f *makeFlow) singleChecked(t Template, x int) []MakeModule {
	jsonMods, v := f.deliveryJSON(t.Example, 1, t.TriggerGuard, x, 0)
	flow := jsonMods
	x += 150 * len(jsonMods)
	trig := 0
	if t.TriggerGuard {
		// Make has no n8n execution id; the trigger claims have a destination of their own.
		tm := f.claim("Claim trigger event", PathBeforeWrite, fmt.Sprintf(`{"key": %s, "payload": %s, "destination": "make-triggers", "dedupe": "key", "reference": %s, "execution_id": "{{var.scenario.executionId}}"}`,
			v.trigKey, v.payload(), v.ref), x, 0)
		trig = tm.ID
		tm.OnError = f.claimUnreachable(trig, `"key": `+v.trigKey, t.Example.KeyMake+":trigger", x+150, 900)
		flow = append(flow, tm)
		x += 300
	}
	bw := f.claim(NodeBeforeWrite, PathBeforeWrite, makeBeforeWriteBody(t, v), x+300, 0)
	c := bw.ID
	bw.OnError = f.claimUnreachable(c, `"key": `+v.key, t.Example.KeyMake, x+450, 1200)
	holdsTrigger := func() *MakeFilter {
		return equal("this run holds the trigger claim", ref(trig, "data.decision"), "proceed")
	}
	report := func(kind string, o writeOut, x, y int) []MakeModule {
		w := o.w
		// The webhook's answer after the write: 200 when it exists, else 503 with Retry-After so that the
		// sender delivers again (a 4xx is refused for good: 422).
		switch kind {
		case "answer succeeded":
			return []MakeModule{f.respond("Answer: written", "200", fmt.Sprintf(`{"key": "%s", "state": "succeeded", "external_id": %s}`, ref(c, "data.key"), o.extID), x, y)}
		case "answer failed":
			return []MakeModule{f.respondLater("Answer: deliver again later",
				fmt.Sprintf(`{{if(%d.statusCode >= 400; if(%d.statusCode < 500; if(%d.statusCode = 429; 503; 422); 503); 503)}}`, w, w, w),
				retryAfterSeconds(w, "60"),
				fmt.Sprintf(`{"key": "%s", "http_status": %s}`, ref(c, "data.key"), ref(w, "statusCode")), x, y)}
		case "answer transport":
			return []MakeModule{f.respondLater("Answer: deliver again later", "503", "60", fmt.Sprintf(`{"key": "%s", "state": "unknown or failed"}`, ref(c, "data.key")), x, y)}
		}
		if trig == 0 {
			return nil
		}
		var body string
		switch kind {
		case "succeeded", "stored":
			body = fmt.Sprintf(`{"key": "%s", "claim": "%s", "outcome": "succeeded", "external_id": %s}`, ref(trig, "data.key"), ref(trig, "data.claim"), o.extID)
		case "failed":
			body = statusEvidence(claimOf(trig), o, false)
		case "transport":
			body = transportEvidence(claimOf(trig), o)
		case "nothing":
			body = fmt.Sprintf(`{"key": "%s", "claim": "%s", "outcome": "failed", "error": {"class": "validation", "code": "%s/%s", "message": "this run sent nothing"}}`, ref(trig, "data.key"), ref(trig, "data.claim"), ref(c, "data.decision"), ref(c, "data.reason"))
		case "refused":
			body = fmt.Sprintf(`{"key": "%s", "claim": "%s", "outcome": "failed", "error": {"class": "validation", "code": "before-write refused", "message": "this run sent nothing: companion answered HTTP %s to the write's claim"}}`, ref(trig, "data.key"), ref(trig, "data.claim"), ref(c, "statusCode"))
		}
		// Only a run that holds the trigger claim reports it; a run that went on without it (the trigger's
		// attempts spent, a retry time, an owner) reports nothing, so it uses up nothing.
		m := withBody(f.companion("Record trigger outcome ("+kind+")", PathAfterWrite, "", x, y), body)
		m.Filter = holdsTrigger()
		return []MakeModule{m}
	}
	proceed := f.writeTail(c, equal("proceed", ref(c, "data.decision"), "proceed"), writeBody(v), x+900, -300, report)
	// A skip carries the stored external id (whatever the destination answered): serialized like any text.
	st := f.toJSON("JSON: stored external id", ref(c, "data.external_id"), x+900, 150)
	so := writeOut{extID: jsonOrNull(st.ID)}
	var stored []MakeModule
	if trig != 0 {
		st.Filter = &MakeFilter{Name: "skip: already succeeded", Conditions: [][]MakeCondition{{
			{A: ref(c, "data.decision"), O: "text:equal", B: "skip"}, {A: ref(c, "data.reason"), O: "text:equal", B: "succeeded"},
		}}}
		ans := f.respond("Answer: stored result", "200", fmt.Sprintf(`{"key": "%s", "decision": "skip", "external_id": %s}`, ref(c, "data.key"), so.extID), x+1050, 150)
		stored = append([]MakeModule{st, ans}, report("stored", so, x+1200, 150)...)
	} else {
		st.Filter = equal("skip", ref(c, "data.decision"), "skip")
		r := f.respondLater("Answer: stored result", skipStatus(c), fmt.Sprintf(`{{ifempty(%d.data.retry_after; 60)}}`, c), fmt.Sprintf(`{"key": "%s", "decision": "%s", "reason": "%s", "external_id": %s}`, ref(c, "data.key"), ref(c, "data.decision"), ref(c, "data.reason"), so.extID), x+1050, 150)
		stored = []MakeModule{st, r}
	}
	routes := [][]MakeModule{proceed, stored}
	if trig != 0 {
		ans := f.respondLater("Answer: nothing sent", fmt.Sprintf(`{{if(%d.data.decision = "conflict"; 409; %s)}}`, c, strings.Trim(skipStatus(c), "{}")),
			fmt.Sprintf(`{{ifempty(%d.data.retry_after; 60)}}`, c), fmt.Sprintf(`{"key": "%s", "decision": "%s", "reason": "%s"}`, ref(c, "data.key"), ref(c, "data.decision"), ref(c, "data.reason")), x+900, 450)
		ans.Filter = &MakeFilter{Name: "nothing sent", Conditions: [][]MakeCondition{
			{{A: ref(c, "data.decision"), O: "text:equal", B: "skip"}, {A: ref(c, "data.reason"), O: "text:notequal", B: "succeeded"}},
			{{A: ref(c, "data.decision"), O: "text:equal", B: "conflict"}},
		}}
		routes = append(routes, append([]MakeModule{ans}, report("nothing", writeOut{}, x+1200, 450)...))
	} else {
		cf := f.respond("Answer: conflict, needs a person", "409", fmt.Sprintf(`{"key": "%s", "decision": "conflict", "reason": "%s"}`, ref(c, "data.key"), ref(c, "data.reason")), x+900, 450)
		cf.Filter = equal("conflict", ref(c, "data.decision"), "conflict")
		routes = append(routes, []MakeModule{cf})
	}
	if t.Dedupe == DedupeLookup {
		routes = append(routes, f.reconcileRoute(t, v, c, x+900, 750, report))
	}
	// Any status but 200 is companion refusing the claim: answered with its status and words; a run that
	// holds the trigger claim reports it (this run sent nothing), after the answer.
	var reportRefused func(x, y int) []MakeModule
	if trig != 0 {
		reportRefused = func(x, y int) []MakeModule { return report("refused", writeOut{}, x, y) }
	}
	routes = append(routes, f.claimRefused(c, `"key": `+v.key, t.Example.KeyMake, x+900, 1050, reportRefused))
	decision := f.router("Decision", x+600, 0, routes...)
	if trig == 0 {
		return append(flow, bw, decision)
	}
	// Only a finished or a running delivery of the same event stops here (and a conflict, surfaced). Any
	// other skip of the trigger claim (its attempts spent, a retry time, an owner) goes on to the write's
	// own before-write, which decides: the guard never stops a write the ledger would let through.
	bw.Filter = &MakeFilter{Name: "first delivery, or not a duplicate", Conditions: [][]MakeCondition{
		{{A: ref(trig, "data.decision"), O: "text:equal", B: "proceed"}},
		{{A: ref(trig, "data.decision"), O: "text:equal", B: "skip"}, {A: ref(trig, "data.reason"), O: "text:notequal", B: "succeeded"}, {A: ref(trig, "data.reason"), O: "text:notequal", B: "in_progress"}},
	}}
	dup := f.respondLater("Answer: duplicate trigger", fmt.Sprintf(`{{if(%d.data.decision = "conflict"; 409; if(%d.data.reason = "succeeded"; 200; 503))}}`, trig, trig), fmt.Sprintf(`{{ifempty(%d.data.retry_after; 30)}}`, trig), fmt.Sprintf(`{"duplicate": true, "key": "%s", "reason": "%s"}`, ref(trig, "data.key"), ref(trig, "data.reason")), x+300, 600)
	dup.Filter = &MakeFilter{Name: "duplicate delivery", Conditions: [][]MakeCondition{
		{{A: ref(trig, "data.decision"), O: "text:equal", B: "skip"}, {A: ref(trig, "data.reason"), O: "text:equal", B: "succeeded"}},
		{{A: ref(trig, "data.decision"), O: "text:equal", B: "skip"}, {A: ref(trig, "data.reason"), O: "text:equal", B: "in_progress"}},
		{{A: ref(trig, "data.decision"), O: "text:equal", B: "conflict"}},
	}}
	// A trigger claim companion refuses (the key out of its rules) is answered with companion's words:
	// the write's own claim, with the same key, would be refused too.
	guard := f.router("First delivery?", x, 0, []MakeModule{bw, decision}, []MakeModule{dup}, f.claimRefused(trig, `"key": `+v.trigKey, t.Example.KeyMake+":trigger", x+300, 900, nil))
	return append(flow, guard)
}

// skipStatus is the answer to a skip: 200 when the effect exists, 422 when it failed for good, else 503
// (in progress, retry later, waiting for a person: a later delivery can still finish it).
func skipStatus(c int) string {
	return fmt.Sprintf(`{{if(%d.data.reason = "succeeded"; 200; if(%d.data.reason = "failed_permanent"; 422; 503))}}`, c, c)
}

// reconcileRoute: look the reference up, report the finding, ask before-write again and write
// once more only if it now says proceed (the lookup proved the record absent). Each evidence text
// and the found record's id go through a json:TransformToJSON module. Every end answers the webhook
// (report gives the write's answers): a found record 200, a lookup that failed 503, the second claim's
// decision as the first one's; until 2026-12-01 no end of this route answered, so the sender got
// whatever Make answers a run that reaches no Webhook response.
func (f *makeFlow) reconcileRoute(t Template, v makeValues, c int, x, y int, report func(kind string, o writeOut, x, y int) []MakeModule) []MakeModule {
	lk := f.http("YOUR LOOKUP: find by reference", "get", f.s.LookupURL, "", false, x, y)
	mp := lk.Mapper.(MakeHTTPMapper)
	mp.Headers = []MakeHeader{}
	mp.QueryParameters = []MakeHeader{{Name: "reference", Value: ref(c, "data.reference")}}
	mp.Timeout = (f.s.WriteTimeoutMillis + 999) / 1000
	lk.Mapper = mp
	lk.Filter = equal("reconcile", ref(c, "data.decision"), "reconcile")
	finding := func(name, finding string, extID string, evidence int, x, y int) MakeModule {
		body := fmt.Sprintf(`{"key": "%s", "finding": "%s", "evidence": %s}`, ref(c, "data.key"), finding, jsonOf(evidence))
		if extID != "" {
			body = fmt.Sprintf(`{"key": "%s", "finding": "%s", "external_id": %s, "evidence": %s}`, ref(c, "data.key"), finding, extID, jsonOf(evidence))
		}
		return withBody(f.companion(name, PathReconcile, "", x, y), body)
	}
	failedEv := f.toJSON("JSON: evidence (lookup failed)", fmt.Sprintf("lookup by reference {{%d.data.reference}} failed: Make {{%d.error.type}}: {{%d.error.message}}", c, lk.ID, lk.ID), x+150, y+300)
	lookupFailed := func(x, y int) MakeModule {
		return f.respondLater("Answer: lookup failed, deliver again later", "503", fmt.Sprintf(`{{ifempty(%d.data.retry_after; 60)}}`, c), fmt.Sprintf(`{"key": "%s", "decision": "reconcile", "finding": "lookup_failed"}`, ref(c, "data.key")), x, y)
	}
	lk.OnError = []MakeModule{failedEv, finding("Reconcile: lookup failed", "lookup_failed", "", failedEv.ID, x+300, y+300), lookupFailed(x+450, y+300), f.module("End the item here", "builtin:Ignore", x+600, y+300)}
	foundExt := f.toJSON("JSON: found external id", fmt.Sprintf(`{{get(map(%d.data.records; "id"); 1)}}`, lk.ID), x+450, y-300)
	foundExt.Filter = &MakeFilter{Name: "found", Conditions: [][]MakeCondition{{{A: ref(lk.ID, "statusCode"), O: "number:equal", B: "200"}, {A: fmt.Sprintf("{{length(%d.data.records)}}", lk.ID), O: "number:greater", B: "0"}}}}
	foundEv := f.toJSON("JSON: evidence (found)", fmt.Sprintf(`lookup by reference {{%d.data.reference}} found {{join(map(%d.data.records; "id"); ", ")}}`, c, lk.ID), x+600, y-300)
	found := finding("Reconcile: found", "found", jsonOrNull(foundExt.ID), foundEv.ID, x+600, y-150)
	foundAns := f.respond("Answer: found, written before", "200", fmt.Sprintf(`{"key": "%s", "state": "succeeded", "finding": "found", "external_id": %s}`, ref(c, "data.key"), jsonOrNull(foundExt.ID)), x+750, y-150)
	absentEv := f.toJSON("JSON: evidence (absent)", fmt.Sprintf("lookup by reference {{%d.data.reference}} found no record (HTTP 200, empty list)", c), x+450, y+150)
	absentEv.Filter = &MakeFilter{Name: "absent", Conditions: [][]MakeCondition{{{A: ref(lk.ID, "statusCode"), O: "number:equal", B: "200"}, {A: fmt.Sprintf("{{length(%d.data.records)}}", lk.ID), O: "number:equal", B: "0"}}}}
	absent := finding("Reconcile: absent", "absent", "", absentEv.ID, x+600, y+150)
	again := f.claim("Before-write again", PathBeforeWrite, makeBeforeWriteBody(t, v), x+900, y+150)
	a := again.ID
	again.OnError = f.claimUnreachable(a, `"key": `+v.key, t.Example.KeyMake, x+1050, y+450)
	replay := f.writeTail(a, equal("proceed", ref(a, "data.decision"), "proceed"), writeBody(v), x+1350, y+150, report)
	// Any other decision of the second claim is answered as the first claim's would be.
	st := f.toJSON("JSON: stored external id (again)", ref(a, "data.external_id"), x+1350, y+450)
	st.Filter = &MakeFilter{Name: "not proceed", Conditions: [][]MakeCondition{{{A: ref(a, "statusCode"), O: "number:equal", B: "200"}, {A: ref(a, "data.decision"), O: "text:notequal", B: "proceed"}}}}
	notAgain := f.respondLater("Answer: not written again", fmt.Sprintf(`{{if(%d.data.decision = "conflict"; 409; %s)}}`, a, strings.Trim(skipStatus(a), "{}")), fmt.Sprintf(`{{ifempty(%d.data.retry_after; 60)}}`, a),
		fmt.Sprintf(`{"key": "%s", "decision": "%s", "reason": "%s", "external_id": %s}`, ref(a, "data.key"), ref(a, "data.decision"), ref(a, "data.reason"), jsonOrNull(st.ID)), x+1500, y+450)
	decAgain := f.router("Decision again", x+1200, y+150, replay, []MakeModule{st, notAgain}, f.claimRefused(a, `"key": `+v.key, t.Example.KeyMake, x+1350, y+750, nil))
	lfailEv := f.toJSON("JSON: evidence (lookup answered)", fmt.Sprintf("lookup by reference {{%d.data.reference}} answered HTTP {{%d.statusCode}}", c, lk.ID), x+450, y+450)
	lfailEv.Filter = &MakeFilter{Name: "lookup did not work", Conditions: [][]MakeCondition{{{A: ref(lk.ID, "statusCode"), O: "number:notequal", B: "200"}}}}
	lfail := finding("Reconcile: lookup failed", "lookup_failed", "", lfailEv.ID, x+600, y+450)
	r := f.router("Finding", x+300, y, []MakeModule{foundExt, foundEv, found, foundAns}, []MakeModule{absentEv, absent, again, decAgain}, []MakeModule{lfailEv, lfail, lookupFailed(x+750, y+450)})
	return []MakeModule{lk, r}
}

// batchAnswer answers the webhook once for the whole delivery, after every item was claimed, written and
// reported, as the n8n batch template does, first match wins: 409 when an item conflicts, 503 with the
// soonest Retry-After when an item can still finish (in progress, retry later, waiting for its owner, a
// reconcile, a write that failed retryably, is unknown or did not answer), 422 when items were refused
// for good, else 200. Module c is the batch call, a the aggregator of the written items (key, answer,
// retry_after). The counts come from the call's decisions and the aggregated writes: a write that
// failed in transport is not aggregated (its error handler ends the item), so it counts as one that can
// still finish. The body lists the keys per answer (all but the 503s, which are the rest) and
// companion's decision counts; never a claim. It returns a function making the answer, placed once
// after the batch after-write and once for a delivery where nothing was written.
func (f *makeFlow) batchAnswer(c, a int) func(x, y int) []MakeModule {
	items := fmt.Sprintf("%d.data.items", c)
	nDecision := func(d string) string { return fmt.Sprintf(`length(map(%s; "key"; "decision"; "%s"))`, items, d) }
	nReason := func(r string) string { return fmt.Sprintf(`length(map(%s; "key"; "reason"; "%s"))`, items, r) }
	nWritten := func(w string) string { return fmt.Sprintf(`length(map(%d.array; "key"; "answer"; "%s"))`, a, w) }
	later := fmt.Sprintf("%s - %s - %s + %s + %s - %s - %s", nDecision("skip"), nReason("succeeded"), nReason("failed_permanent"), nDecision("reconcile"), nDecision("proceed"), nWritten("ok"), nWritten("final"))
	final := nReason("failed_permanent") + " + " + nWritten("final")
	status := fmt.Sprintf(`{{if(%s > 0; 409; if((%s) > 0; 503; if((%s) > 0; 422; 200)))}}`, nDecision("conflict"), later, final)
	retryAfter := fmt.Sprintf(`{{min(ifempty(min(map(%s; "retry_after")); 60); ifempty(min(map(%d.array; "retry_after")); 60))}}`, items, a)
	return func(x, y int) []MakeModule {
		var mods []MakeModule
		js := func(name, object string) string {
			m := f.toJSON("JSON: "+name, object, x+150*len(mods), y)
			mods = append(mods, m)
			return jsonOf(m.ID)
		}
		body := fmt.Sprintf(`{"status": %s, "batch_id": "make-{{var.scenario.id}}-exec-{{var.scenario.executionId}}", "counts": %s, "answers": {"200": %s, "409": %s, "503": %s, "422": %s}, "written": %s, "stored": %s, "conflict": %s, "refused_for_good": %s, "message": "200 every item's effect exists; 409 an item conflicts (a person decides); 503 an item can still finish: deliver again after Retry-After; 422 items were refused for good"}`,
			js("answer status", status), js("decision counts", ref(c, "data.counts")),
			js("items answered 200", "{{"+nWritten("ok")+" + "+nReason("succeeded")+"}}"), js("items answered 409", "{{"+nDecision("conflict")+"}}"),
			js("items answered 503", "{{"+later+"}}"), js("items answered 422", "{{"+final+"}}"),
			js("keys written", fmt.Sprintf(`{{map(%d.array; "key"; "answer"; "ok")}}`, a)), js("keys stored", fmt.Sprintf(`{{map(%s; "key"; "reason"; "succeeded")}}`, items)),
			js("keys in conflict", fmt.Sprintf(`{{map(%s; "key"; "decision"; "conflict")}}`, items)),
			js("keys refused for good", fmt.Sprintf(`{{merge(map(%d.array; "key"; "answer"; "final"); map(%s; "key"; "reason"; "failed_permanent"))}}`, a, items)))
		return append(mods, f.respondLater("Answer: the delivery", status, retryAfter, body, x+150*len(mods), y))
	}
}

func (f *makeFlow) batch(t Template) []MakeModule {
	hook := f.module("Trigger: items to write", "gateway:CustomWebHook", 0, 0)
	hook.Parameters = map[string]string{}
	hook.Mapper = map[string]string{}
	settings := f.settings(150, -300)
	items := f.module("YOUR ITEMS: one bundle per write", "builtin:BasicFeeder", 300, 0)
	items.Parameters = map[string]string{}
	items.Mapper = map[string]string{"array": "{{1.items}}"}
	ex := t.Example
	// Inside the loop each value the bodies need is serialized once per bundle.
	jsonMods, v := f.deliveryJSON(ex, items.ID, false, 450, 150)
	compose := f.module("One batch item", "util:ComposeTransformer", 600, 0)
	compose.Parameters = map[string]string{}
	compose.Mapper = map[string]string{"value": fmt.Sprintf(`{"key": %s, "payload": %s, "destination": "%s", "dedupe": "%s", "reference": %s}`, v.key, v.payload(), t.Destination, t.Dedupe, v.ref)}
	// The aggregator keeps, beside each batch item's JSON, the key and the JSON of the values the write
	// sends: once it has closed the loop, the feeder's bundles are gone, and the write finds its values
	// here by key.
	agg := f.module("All items", "builtin:BasicAggregator", 900, 0)
	agg.Parameters = map[string]int{"feeder": items.ID}
	aggFields := map[string]string{"value": ref(compose.ID, "value"), "key": strings.ReplaceAll(ex.KeyMake, "{{1.", fmt.Sprintf("{{%d.", items.ID)), "reference": v.ref}
	for _, p := range v.fields {
		aggFields[p.name] = p.json
	}
	// Each item also keeps the fields it lacks (" invoice amount", or nothing): an item missing a field
	// its key, reference or payload is built from would build a key every such item shares.
	var lacks []string
	for _, fd := range deliveryFields(ex) {
		lacks = append(lacks, lacksExpr(items.ID, fd))
	}
	aggFields["missing"] = strings.Join(lacks, "")
	agg.Mapper = aggFields
	check := f.module("Check delivery", "builtin:BasicRouter", 1050, 0)
	check.Mapper = json.RawMessage("null")
	missing := fmt.Sprintf(`{{length(join(map(%d.array; "missing"); ""))}}`, agg.ID)
	claim := f.claim("Batch before-write", PathBatchBeforeWrite, fmt.Sprintf(`{"batch_id": "make-{{var.scenario.id}}-exec-{{var.scenario.executionId}}", "items": [{{join(map(%d.array; "value"); ", ")}}]}`, agg.ID), 1200, 0)
	// The keys of the call, for the answers that name every item of it (a refused or unreached call).
	keys := f.toJSON("JSON: keys of the batch", fmt.Sprintf(`{{map(%d.array; "key")}}`, agg.ID), 1200, -150)
	named := `"items": ` + jsonOf(keys.ID)
	what := fmt.Sprintf("the batch of {{length(%d.array)}} items", agg.ID)
	// An empty aggregation (no items, or a re-run where the trigger sent none) stops here instead of
	// sending {"items": []}, which the service refuses; so does a batch with an incomplete item (below).
	keys.Filter = &MakeFilter{Name: "at least one item, none incomplete", Conditions: [][]MakeCondition{{
		{A: fmt.Sprintf("{{length(%d.array)}}", agg.ID), O: "number:greater", B: "0"},
		{A: missing, O: "number:equal", B: "0"},
	}}}
	// A batch with an incomplete item claims nothing and answers 400 with, per item in delivery order,
	// the fields it lacks.
	lacking := f.toJSON("JSON: fields each item lacks", fmt.Sprintf(`{{map(%d.array; "missing")}}`, agg.ID), 1200, 300)
	lacking.Filter = &MakeFilter{Name: "an item lacks a field", Conditions: [][]MakeCondition{{{A: missing, O: "number:greater", B: "0"}}}}
	refuse := f.respond("Answer: delivery incomplete", "400", fmt.Sprintf(`{"error": "missing_fields", "message": "an item lacks a field its key, reference or payload is built from; nothing was claimed", "missing": %s}`, jsonOf(lacking.ID)), 1350, 300)
	// A call companion refuses (any invalid item refuses it all, nothing of it claimed) or cannot record
	// is answered with companion's status and words, every key of the call named; an unreached companion
	// 503. Before 2026-12-01 either stopped the run with an error.
	claim.OnError = f.claimUnreachable(claim.ID, named, what, 1350, 600)
	refusedCall := f.claimRefused(claim.ID, named, what, 1500, 450, nil)
	each := f.module("One bundle per decision", "builtin:BasicFeeder", 1500, 0)
	each.Parameters = map[string]string{}
	each.Mapper = map[string]string{"array": ref(claim.ID, "data.items")}
	each.Filter = &MakeFilter{Name: "the call was answered", Conditions: [][]MakeCondition{{{A: ref(claim.ID, "statusCode"), O: "number:equal", B: "200"}}}}
	// The write: only proceeding items pass its filter. Each write's values come from its decision: the
	// JSON the aggregator kept for the item with the decision's key.
	byKey := func(field string) string {
		return fmt.Sprintf(`{{first(map(%d.array; "%s"; "key"; %d.key))}}`, agg.ID, field, each.ID)
	}
	wv := makeValues{ref: byKey("reference")}
	for _, p := range v.fields {
		wv.fields = append(wv.fields, payloadField{p.name, byKey(p.name)})
	}
	w := f.writeModule(each.ID, equal("proceed", ref(each.ID, "decision"), "proceed"), writeBody(wv), 1800, 0)
	mp := w.Mapper.(MakeHTTPMapper)
	mp.Headers = []MakeHeader{{Name: "Idempotency-Key", Value: ref(each.ID, "idempotency_key")}}
	w.Mapper = mp
	decided := claimRef{ref(each.ID, "key"), ref(each.ID, "claim")}
	msg := f.errorMessage(w.ID, 1950, 300)
	w.OnError = []MakeModule{
		msg,
		withBody(f.companion("After-write: transport failure (never a blind retry)", PathAfterWrite, "", 2100, 300), transportEvidence(decided, writeOut{w: w.ID, message: jsonOf(msg.ID)})),
		f.module("End the item here", "builtin:Ignore", 2400, 300),
	}
	ext := f.toJSON("JSON: external id", ref(w.ID, "data.id"), 1950, -150)
	rid := f.toJSON("JSON: receiver request id", ref(w.ID, "headers.`x-request-id`"), 2100, -150)
	ev := f.module("Evidence", "util:ComposeTransformer", 2100, 0)
	ev.Parameters = map[string]string{}
	ev.Mapper = map[string]string{"value": fmt.Sprintf(`{"key": "%s", "claim": "%s", "outcome": "{{if(%d.statusCode < 300; "succeeded"; if(%d.statusCode < 400; "unknown"; "failed"))}}", "http_status": %s, "external_id": %s, "receiver_request_id": %s, "retry_after": %s}`,
		decided.key, decided.claim, w.ID, w.ID, ref(w.ID, "statusCode"), jsonOrNull(ext.ID), jsonOrNull(rid.ID), retryAfterSeconds(w.ID, `"null"`))}
	all := f.module("All evidence", "builtin:BasicAggregator", 2400, 0)
	all.Parameters = map[string]int{"feeder": each.ID}
	// Beside each evidence, the item's key and what the webhook answers for it: ok (written), final (the
	// destination refused it for good: a 4xx other than 408, 409, 425, 429) or later (anything a
	// redelivery can still finish), and the write's Retry-After in seconds (60 without one, the answer's
	// own default, so the soonest of them never comes from an empty value).
	all.Mapper = map[string]string{"value": ref(ev.ID, "value"), "key": ref(each.ID, "key"), "retry_after": retryAfterSeconds(w.ID, "60"),
		"answer": fmt.Sprintf(`{{if(%[1]d.statusCode < 300; "ok"; if(%[1]d.statusCode < 400; "later"; if(%[1]d.statusCode >= 500; "later"; if(%[1]d.statusCode = 408; "later"; if(%[1]d.statusCode = 409; "later"; if(%[1]d.statusCode = 425; "later"; if(%[1]d.statusCode = 429; "later"; "final")))))))}}`, w.ID)}
	report := f.companion("Batch after-write", PathBatchAfterWrite, fmt.Sprintf(`{"items": [{{join(map(%d.array; "value"); ", ")}}]}`, all.ID), 2700, 0)
	// A batch where nothing proceeded (a re-run of a finished batch) has no evidence to report: stop
	// instead of sending {"items": []}, which the service refuses.
	report.Filter = &MakeFilter{Name: "at least one write", Conditions: [][]MakeCondition{{{A: fmt.Sprintf("{{length(%d.array)}}", all.ID), O: "number:greater", B: "0"}}}}
	// Skip and conflict bundles take their own route: nothing is written for them, and the bundle names
	// the stored result or the conflict (a person decides) for whatever the builder adds after it.
	st := f.toJSON("JSON: stored external id", ref(each.ID, "external_id"), 1800, 300)
	st.Filter = &MakeFilter{Name: "not proceed", Conditions: [][]MakeCondition{{{A: ref(each.ID, "decision"), O: "text:notequal", B: "proceed"}}}}
	rest := f.module("Not written: stored result, retry later or conflict", "util:ComposeTransformer", 1950, 300)
	rest.Parameters = map[string]string{}
	rest.Mapper = map[string]string{"value": fmt.Sprintf(`{"key": "%s", "decision": "%s", "reason": "%s", "external_id": %s}`, ref(each.ID, "key"), ref(each.ID, "decision"), ref(each.ID, "reason"), jsonOrNull(st.ID))}
	answer := f.batchAnswer(claim.ID, all.ID)
	reported := f.router("Report, then answer", 2550, 0, append([]MakeModule{report}, answer(2850, 0)...), answer(2700, 300))
	reported.Routes[1].Flow[0].Filter = &MakeFilter{Name: "nothing written", Conditions: [][]MakeCondition{{{A: fmt.Sprintf("{{length(%d.array)}}", all.ID), O: "number:equal", B: "0"}}}}
	route := f.router("Decision", 1650, 0, []MakeModule{w, ext, rid, ev, all, reported}, []MakeModule{st, rest})
	callAnswer := f.router("Call answer", 1350, 0, []MakeModule{each, route}, refusedCall)
	check.Routes = []MakeRoute{{Flow: []MakeModule{keys, claim, callAnswer}}, {Flow: []MakeModule{lacking, refuse}}}
	flow := append(append([]MakeModule{hook}, settings...), items)
	flow = append(flow, jsonMods...)
	return append(flow, compose, agg, check)
}
