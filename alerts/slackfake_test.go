package alerts_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
)

// fakeSlack is a local HTTP server speaking the part of Slack's Web API the notifier uses
// (auth.test, chat.postMessage, chat.update, views.open, conversations.open, conversations.history with
// metadata) and a response_url endpoint. It records every call.
type fakeSlack struct {
	srv *httptest.Server

	mu         sync.Mutex
	posts      []slackMessage
	updates    []slackMessage
	views      []slackView
	ephemerals []string
	seq        int
	failPosts  int           // answer this many chat.postMessage calls with ok:false
	delay      time.Duration // wait this long before answering chat.postMessage
	onPost     func()        // called when a chat.postMessage that will succeed arrives, before the delay
	// updateDelay and onUpdate are delay and onPost for chat.update.
	updateDelay time.Duration
	onUpdate    func()
	// failUpdates answers this many chat.update calls with ok:false and the error updateError.
	failUpdates int
	updateError string
	// loseAnswers makes this many chat.postMessage calls land (the message is kept, as Slack keeps it) and
	// then lose their answer: the connection is closed instead of answering.
	loseAnswers int
	// dropPosts cuts the connection of this many chat.postMessage calls before Slack takes the message:
	// nothing lands, and the caller cannot know.
	dropPosts int
	// failHistory answers this many conversations.history calls with ok:false.
	failHistory int
	// authError makes auth.test answer ok:false with this error whatever the token; authStatus answers it
	// with this HTTP status instead (429 with Retry-After, 503). auth.test answers invalid_auth to any token
	// but xoxb-test, as Slack does to a token it does not know.
	authError  string
	authStatus int
	// histories counts the conversations.history calls; opens the conversations.open calls.
	histories, opens int
	// scopes, when not nil, is sent as the X-OAuth-Scopes header of every answer, as Slack sends the
	// token's granted scopes; nil sends no such header.
	scopes []string
	// methods counts the calls of each Web API method.
	methods map[string]int
	// now gives the time of a posted message's ts (Slack's clock); nil: a fixed time.
	now func() time.Time
	// answering counts the chat.postMessage calls being answered: a post whose caller gave up still
	// lands (as on Slack), and Settle waits for it.
	answering sync.WaitGroup
}

// slackMessage is one chat.postMessage or chat.update call.
type slackMessage struct {
	Channel string
	TS      string
	Text    string
	Blocks  []map[string]any
	// Metadata is the message's metadata as posted (event_type, event_payload).
	Metadata map[string]any
}

// slackView is one views.open call.
type slackView struct {
	TriggerID string         `json:"trigger_id"`
	View      map[string]any `json:"view"`
}

func newFakeSlack(t *testing.T) *fakeSlack {
	f := &fakeSlack{methods: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/auth.test", f.authTest)
	mux.HandleFunc("/api/chat.postMessage", f.postMessage)
	mux.HandleFunc("/api/chat.update", f.update)
	mux.HandleFunc("/api/views.open", f.viewsOpen)
	mux.HandleFunc("/api/conversations.open", f.conversationsOpen)
	mux.HandleFunc("/api/conversations.history", f.conversationsHistory)
	mux.HandleFunc("/respond/", f.respond)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		if method, ok := strings.CutPrefix(r.URL.Path, "/api/"); ok {
			f.methods[method]++
		}
		if f.scopes != nil {
			w.Header().Set("X-OAuth-Scopes", strings.Join(f.scopes, ","))
		}
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// Methods returns the Web API methods the fake was called with, sorted.
func (f *fakeSlack) Methods() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.methods))
}

func (f *fakeSlack) apiURL() string      { return f.srv.URL + "/api/" }
func (f *fakeSlack) responseURL() string { return f.srv.URL + "/respond/1" }

func (f *fakeSlack) notifier(t *testing.T) *alerts.Slack {
	t.Helper()
	s, err := alerts.NewSlack(alerts.SlackConfig{BotToken: "xoxb-test", SigningSecret: signingSecret, APIURL: f.apiURL()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func readMessage(r *http.Request) (slackMessage, error) {
	if err := r.ParseForm(); err != nil {
		return slackMessage{}, err
	}
	m := slackMessage{Channel: r.PostForm.Get("channel"), TS: r.PostForm.Get("ts"), Text: r.PostForm.Get("text")}
	if b := r.PostForm.Get("blocks"); b != "" {
		if err := json.Unmarshal([]byte(b), &m.Blocks); err != nil {
			return m, err
		}
	}
	if md := r.PostForm.Get("metadata"); md != "" {
		if err := json.Unmarshal([]byte(md), &m.Metadata); err != nil {
			return m, err
		}
	}
	if r.PostForm.Get("token") != "xoxb-test" && r.Header.Get("Authorization") != "Bearer xoxb-test" {
		return m, fmt.Errorf("no bot token")
	}
	return m, nil
}

// authTest answers who the token is, as Slack's auth.test does for a bot token.
func (f *fakeSlack) authTest(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	status, failure := f.authStatus, f.authError
	f.mu.Unlock()
	if status != 0 {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(status)
		return
	}
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if err := r.ParseForm(); err == nil && r.PostForm.Get("token") != "" {
		token = r.PostForm.Get("token")
	}
	switch {
	case token == "":
		failure = "not_authed"
	case failure == "" && token != "xoxb-test":
		failure = "invalid_auth"
	}
	if failure != "" {
		answer(w, map[string]any{"ok": false, "error": failure})
		return
	}
	answer(w, map[string]any{"ok": true, "url": "https://acme.slack.com/", "team": "Acme", "user": "companion",
		"team_id": "T0ACME", "user_id": "U0BOT", "bot_id": "B0BOT"})
}

func (f *fakeSlack) postMessage(w http.ResponseWriter, r *http.Request) {
	f.answering.Add(1)
	defer f.answering.Done()
	m, err := readMessage(r)
	if err != nil {
		answer(w, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	f.mu.Lock()
	delay := f.delay
	if f.dropPosts > 0 {
		f.dropPosts--
		f.mu.Unlock()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	if f.failPosts > 0 {
		f.failPosts--
		f.mu.Unlock()
		answer(w, map[string]any{"ok": false, "error": "ratelimited"})
		return
	}
	onPost := f.onPost
	f.mu.Unlock()
	if onPost != nil {
		onPost()
	}
	time.Sleep(delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	// A message to a user id lands in the app's direct-message conversation with that user.
	channel := dmChannel(m.Channel)
	sec := int64(1764439200)
	if f.now != nil {
		sec = f.now().Unix()
	}
	m.Channel, m.TS = channel, fmt.Sprintf("%d.%06d", sec, f.seq)
	f.posts = append(f.posts, m)
	if f.loseAnswers > 0 {
		// Landed, but the answer never reaches the caller: the connection is cut.
		f.loseAnswers--
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	answer(w, map[string]any{"ok": true, "channel": m.Channel, "ts": m.TS})
}

// dmChannel is the conversation a message to id lands in: a user's direct messages with the app, or the
// channel itself.
func dmChannel(id string) string {
	if strings.HasPrefix(id, "U") {
		return "D" + id[1:]
	}
	return id
}

func (f *fakeSlack) conversationsOpen(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("token") != "xoxb-test" || r.PostForm.Get("users") == "" {
		answer(w, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	f.mu.Lock()
	f.opens++
	f.mu.Unlock()
	answer(w, map[string]any{"ok": true, "no_op": true, "already_open": true, "channel": map[string]any{"id": dmChannel(r.PostForm.Get("users"))}})
}

// conversationsHistory answers with the messages of a conversation newer than oldest (inclusive), newest
// first, with their metadata when include_all_metadata is set; limit and cursor page through them.
func (f *fakeSlack) conversationsHistory(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("token") != "xoxb-test" {
		answer(w, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	q := r.PostForm
	f.mu.Lock()
	defer f.mu.Unlock()
	f.histories++
	if f.failHistory > 0 {
		f.failHistory--
		answer(w, map[string]any{"ok": false, "error": "missing_scope", "needed": "channels:history,groups:history,mpim:history,im:history"})
		return
	}
	oldest, _ := strconv.ParseFloat(q.Get("oldest"), 64)
	var msgs []map[string]any
	for i := len(f.posts) - 1; i >= 0; i-- {
		p := f.posts[i]
		ts, _ := strconv.ParseFloat(p.TS, 64)
		if p.Channel != q.Get("channel") || ts < oldest {
			continue
		}
		m := map[string]any{"type": "message", "ts": p.TS, "text": p.Text}
		if q.Get("include_all_metadata") == "1" && p.Metadata != nil {
			m["metadata"] = p.Metadata
		}
		msgs = append(msgs, m)
	}
	start, _ := strconv.Atoi(q.Get("cursor"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = 100
	}
	end := min(start+limit, len(msgs))
	start = min(start, end)
	res := map[string]any{"ok": true, "messages": msgs[start:end], "has_more": end < len(msgs)}
	if end < len(msgs) {
		res["response_metadata"] = map[string]any{"next_cursor": strconv.Itoa(end)}
	}
	answer(w, res)
}

// Histories returns how many conversations.history calls the fake answered.
func (f *fakeSlack) Histories() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.histories
}

func (f *fakeSlack) update(w http.ResponseWriter, r *http.Request) {
	m, err := readMessage(r)
	if err != nil || m.TS == "" {
		answer(w, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	f.mu.Lock()
	delay, onUpdate := f.updateDelay, f.onUpdate
	f.mu.Unlock()
	if onUpdate != nil {
		onUpdate()
	}
	time.Sleep(delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failUpdates > 0 {
		f.failUpdates--
		answer(w, map[string]any{"ok": false, "error": f.updateError})
		return
	}
	f.updates = append(f.updates, m)
	answer(w, map[string]any{"ok": true, "channel": m.Channel, "ts": m.TS, "text": m.Text})
}

func (f *fakeSlack) viewsOpen(w http.ResponseWriter, r *http.Request) {
	var v slackView
	if err := json.NewDecoder(r.Body).Decode(&v); err != nil || r.Header.Get("Authorization") != "Bearer xoxb-test" {
		answer(w, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.views = append(f.views, v)
	answer(w, map[string]any{"ok": true, "view": map[string]any{"id": "V1"}})
}

func (f *fakeSlack) respond(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m struct {
		Text         string `json:"text"`
		ResponseType string `json:"response_type"`
	}
	_ = json.Unmarshal(b, &m)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ephemerals = append(f.ephemerals, m.ResponseType+": "+m.Text)
	w.WriteHeader(http.StatusOK)
}

// Settle waits until every chat.postMessage that arrived has landed or failed, its caller gone or not.
func (f *fakeSlack) Settle() { f.answering.Wait() }

func (f *fakeSlack) Posts() []slackMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]slackMessage(nil), f.posts...)
}

func (f *fakeSlack) Updates() []slackMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]slackMessage(nil), f.updates...)
}

func (f *fakeSlack) Views() []slackView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]slackView(nil), f.views...)
}

func (f *fakeSlack) Ephemerals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ephemerals...)
}

// buttons returns the buttons of a message: action id and value per actions block.
func (m slackMessage) buttons() [][2]string {
	var out [][2]string
	for _, b := range m.Blocks {
		if b["type"] != "actions" {
			continue
		}
		for _, el := range b["elements"].([]any) {
			e := el.(map[string]any)
			out = append(out, [2]string{e["action_id"].(string), e["value"].(string)})
		}
	}
	return out
}

// texts joins the text of all blocks of a message.
func (m slackMessage) texts() string {
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if s, ok := x["text"].(string); ok {
				b.WriteString(s + "\n")
			}
			for k, c := range x {
				if k != "text" || !isString(c) {
					walk(c)
				}
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	for _, bl := range m.Blocks {
		walk(bl)
	}
	return b.String()
}

func isString(v any) bool { _, ok := v.(string); return ok }
