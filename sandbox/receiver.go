package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Dedupe says how the receiver treats a repeated Idempotency-Key.
type Dedupe string

// The dedupe modes.
const (
	// DedupeKey behaves like a destination that honours Idempotency-Key: a
	// repeat with the same key and the same body (as canonical JSON) gets the
	// first response again and creates nothing; the same key with another
	// body is refused with 422.
	DedupeKey Dedupe = "key"
	// DedupeNone behaves like a destination that ignores Idempotency-Key:
	// every call creates a record.
	DedupeNone Dedupe = "none"
)

func (d Dedupe) valid() bool { return d == DedupeKey || d == DedupeNone }

// Defaults and limits of the receiver.
const (
	// DefaultAddr is where `companion receiver` listens unless --addr says otherwise.
	DefaultAddr = "127.0.0.1:9090"
	// MaxBodyBytes is the largest POST /records body accepted; larger is 413.
	MaxBodyBytes = 1 << 20
	// ShutdownTimeout bounds how long Serve waits for requests in progress
	// once its context is done.
	ShutdownTimeout = 5 * time.Second
	// dataFile is the file in Config.DataDir that holds records and keys.
	dataFile = "receiver.json"
)

// Response headers with a meaning in the contract, and the request header the
// receiver dedupes on.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderRequestID      = "X-Request-Id"
	HeaderReplayed       = "Idempotent-Replayed"
)

// Config configures a Receiver. The zero value is usable: key dedupe, keys
// kept forever, logs to stderr, the real clock, records in memory only.
type Config struct {
	// Dedupe is the starting mode; "" means DedupeKey. PUT /control/mode
	// changes it at run time.
	Dedupe Dedupe
	// KeyRetention is how long an Idempotency-Key is remembered after the
	// record it created; a key older than that is forgotten, so reusing it
	// creates a new record. Zero means forever.
	KeyRetention time.Duration
	// Logger gets one line per request; nil means a text logger on os.Stderr.
	Logger *slog.Logger
	// Now is the clock for created_at and key retention; nil means time.Now.
	Now func() time.Time
	// LookupLag is how long a created record stays out of GET /records (a search index that lags the
	// writes); zero shows it at once. PUT /control/mode changes it at run time.
	LookupLag time.Duration
	// DataDir, when set, is a directory where records and remembered keys are
	// kept as JSON (receiver.json), so a restart keeps them. Mode and queued
	// faults are not kept. Empty means memory only.
	DataDir string
}

// Record is one business record the receiver created. It is the body of a
// 201 from POST /records and an element of GET /records.
type Record struct {
	ID             string    `json:"id"`
	Reference      string    `json:"reference"`
	IdempotencyKey string    `json:"idempotency_key"`
	CreatedAt      time.Time `json:"created_at"`
}

// Effects counts the records created: what a test compares with what the
// ledger believes. It is the body of GET /effects.
type Effects struct {
	Total            int            `json:"total"`
	ByReference      map[string]int `json:"by_reference"`
	ByIdempotencyKey map[string]int `json:"by_idempotency_key"`
}

// keyEntry is what the receiver remembers of an Idempotency-Key in key mode.
type keyEntry struct {
	// Fingerprint is the hex SHA-256 of the first body as canonical JSON.
	Fingerprint string `json:"fingerprint"`
	// FirstSeen starts the key's retention; repeats do not extend it.
	FirstSeen time.Time `json:"first_seen"`
	// Response is the body of the 201 the key's record produced, replayed
	// as is, even when a fault replaced or withheld that first answer.
	Response json.RawMessage `json:"response"`
}

// Receiver is the sandbox receiver. Its methods are safe for concurrent use.
type Receiver struct {
	logger   *slog.Logger
	now      func() time.Time
	dataPath string
	handler  http.Handler
	requests atomic.Uint64

	// mu guards everything below. A commit (key check, record, key entry,
	// file write) happens under it as one step, which is what makes
	// simultaneous repeats of one key create exactly one record.
	mu           sync.Mutex
	dedupe       Dedupe
	keyRetention time.Duration
	lookupLag    time.Duration
	records      []Record
	keys         map[string]keyEntry
	lastRecord   uint64 // never reset, so record ids stay unique for the data's lifetime
	faults       []queuedFault

	// mail is the SMTP destination's (ServeSMTP), with its own lock.
	mail mailbox
}

// New returns a Receiver for cfg, loading cfg.DataDir's records if there are
// any. It fails on an unknown dedupe mode, a negative key retention, or data
// it cannot read.
func New(cfg Config) (*Receiver, error) {
	if cfg.Dedupe == "" {
		cfg.Dedupe = DedupeKey
	}
	if !cfg.Dedupe.valid() {
		return nil, fmt.Errorf("sandbox: dedupe must be %q or %q, not %q", DedupeKey, DedupeNone, cfg.Dedupe)
	}
	if cfg.KeyRetention < 0 {
		return nil, fmt.Errorf("sandbox: key retention must not be negative, got %s", cfg.KeyRetention)
	}
	if cfg.LookupLag < 0 {
		return nil, fmt.Errorf("sandbox: lookup lag must not be negative, got %s", cfg.LookupLag)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rc := &Receiver{
		logger:       cfg.Logger,
		now:          cfg.Now,
		dedupe:       cfg.Dedupe,
		keyRetention: cfg.KeyRetention,
		lookupLag:    cfg.LookupLag,
		keys:         make(map[string]keyEntry),
	}
	rc.mail.now = cfg.Now
	if cfg.DataDir != "" {
		if err := rc.load(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	rc.handler = rc.routes()
	return rc, nil
}

// Handler returns the receiver's HTTP API. Served this way the refuse fault
// has no effect, since it acts on the listener; use Serve for it.
func (rc *Receiver) Handler() http.Handler { return rc.handler }

// Serve answers connections on ln until ctx is done, then shuts down
// gracefully, waiting at most ShutdownTimeout for requests in progress; a
// commit_then_delay in progress stops waiting and answers at once. Connections
// are accepted through a wrapper that applies queued refuse faults. Serve
// closes ln and returns nil after a clean shutdown.
func (rc *Receiver) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           rc.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// Requests inherit ctx, so a delayed answer is cut short by shutdown
		// as well as by its caller going away.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(rc.logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(refusingListener{Listener: ln, rc: rc}) }()
	select {
	case err := <-served:
		return fmt.Errorf("sandbox: serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	<-served
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("sandbox: shutdown: %w", err)
	}
	return nil
}

// refusingListener applies queued refuse faults to accepted connections.
type refusingListener struct {
	net.Listener
	rc *Receiver
}

// Accept returns the next connection that no refuse fault claims. A claimed
// one is closed with linger 0, which makes the kernel send RST, before a
// byte of it is read.
func (l refusingListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.rc.takeRefuse() {
			return conn, nil
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		_ = conn.Close()
		l.rc.logger.Info("connection refused", "fault", FaultRefuse, "remote", conn.RemoteAddr().String())
	}
}

// Effects returns the counts of created records, as GET /effects does.
func (rc *Receiver) Effects() Effects {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e := Effects{Total: len(rc.records), ByReference: map[string]int{}, ByIdempotencyKey: map[string]int{}}
	for _, r := range rc.records {
		if r.Reference != "" {
			e.ByReference[r.Reference]++
		}
		if r.IdempotencyKey != "" {
			e.ByIdempotencyKey[r.IdempotencyKey]++
		}
	}
	return e
}

func (rc *Receiver) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /records", rc.createRecord)
	mux.HandleFunc("GET /records", rc.lookupRecords)
	mux.HandleFunc("GET /effects", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, rc.Effects())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /control/reset", rc.reset)
	mux.HandleFunc("GET /control/mode", rc.getMode)
	mux.HandleFunc("PUT /control/mode", rc.putMode)
	mux.HandleFunc("GET /control/faults", rc.listFaults)
	mux.HandleFunc("POST /control/faults", rc.queueFault)
	mux.HandleFunc("DELETE /control/faults", rc.clearFaults)
	mux.HandleFunc("GET /mail", rc.getMail)
	mux.HandleFunc("POST /control/mail-faults", rc.queueMailFault)
	mux.HandleFunc("DELETE /control/mail", rc.clearMail)
	return rc.logRequests(mux)
}

// errKeyReused is a key-mode repeat of an Idempotency-Key with another body.
var errKeyReused = errors.New("idempotency key reused with a different body")

// commitResult is what the commit step produced: a new record's 201 body, or
// the first one again for a repeated key.
type commitResult struct {
	response json.RawMessage
	replayed bool
}

// createRecord is POST /records. Its steps are the fault boundaries: read and
// validate, before_commit faults, commit (create or find the replay),
// after_commit faults, answer.
func (rc *Receiver) createRecord(w http.ResponseWriter, r *http.Request) {
	entry := logEntryFrom(r.Context())
	key := r.Header.Get(HeaderIdempotencyKey)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the body exceeds %d bytes", MaxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_body", "the body could not be read")
		return
	}
	canonical, reference, err := parseRecordBody(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_body", err.Error())
		return
	}
	entry.reference = reference

	fault, err := rc.faultFor(r, Fault.forWrite, reference)
	entry.fault = fault.Fault
	if err != nil {
		writeFaultError(w, err)
		return
	}
	switch fault.Fault {
	case FaultReject429:
		w.Header().Set("Retry-After", strconv.Itoa(fault.RetryAfter))
		writeError(w, http.StatusTooManyRequests, "rate_limited", "too many requests")
		return
	case FaultReject400:
		writeError(w, http.StatusBadRequest, "validation_failed", "the record was rejected by validation")
		return
	case FaultReject500:
		writeError(w, http.StatusInternalServerError, "internal_error", "internal error")
		return
	}

	res, err := rc.commit(key, reference, canonical)
	if errors.Is(err, errKeyReused) {
		writeError(w, http.StatusUnprocessableEntity, "idempotency_key_reused", "this Idempotency-Key was used with a different body")
		return
	}
	if err != nil {
		rc.logger.Error("commit failed", "request_id", entry.requestID, "err", err)
		writeError(w, http.StatusInternalServerError, "internal_error", "internal error")
		return
	}
	entry.replayed = res.replayed

	switch fault.Fault {
	case FaultCommitThenDrop:
		dropConnection(w)
		return
	case FaultCommitThen500:
		writeError(w, http.StatusInternalServerError, "internal_error", "internal error")
		return
	case FaultCommitThenDelay:
		timer := time.NewTimer(fault.Delay)
		select {
		case <-timer.C:
		case <-r.Context().Done():
			// The caller left or the server is shutting down; answer now
			// (harmless if nobody listens) rather than hold shutdown back.
			timer.Stop()
		}
	}
	if res.replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	writeRaw(w, http.StatusCreated, res.response)
}

// dropConnection closes the connection under w without a response byte.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): aborting the handler resets the stream,
		// the closest thing to a dropped connection.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// parseRecordBody checks that body is one JSON object and returns it as
// canonical JSON with its string field reference ("" when absent or null).
func parseRecordBody(body []byte) (canonical []byte, reference string, err error) {
	canonical, err = canonicalJSON(body)
	if err != nil {
		return nil, "", fmt.Errorf("the body is not valid JSON: %v", err)
	}
	if canonical[0] != '{' {
		return nil, "", errors.New("the body must be a JSON object")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(canonical, &members); err != nil {
		return nil, "", fmt.Errorf("the body is not valid JSON: %v", err)
	}
	raw, ok := members["reference"]
	if !ok || string(raw) == "null" {
		return canonical, "", nil
	}
	if err := json.Unmarshal(raw, &reference); err != nil {
		return nil, "", errors.New("reference must be a string")
	}
	return canonical, reference, nil
}

// commit creates a record, or in key mode finds the first response of a
// repeated key, as one step under rc.mu. With a data dir the record is on disk
// before it counts; if writing fails nothing is created.
func (rc *Receiver) commit(key, reference string, canonical []byte) (commitResult, error) {
	sum := sha256.Sum256(canonical)
	fingerprint := hex.EncodeToString(sum[:])

	rc.mu.Lock()
	defer rc.mu.Unlock()
	now := rc.now()
	dedupe := key != "" && rc.dedupe == DedupeKey
	prev, hadPrev := rc.keys[key]
	if dedupe && hadPrev && !rc.forgottenLocked(prev, now) {
		if prev.Fingerprint != fingerprint {
			return commitResult{}, errKeyReused
		}
		return commitResult{response: prev.Response, replayed: true}, nil
	}

	rc.lastRecord++
	rec := Record{
		ID:             "rec_" + strconv.FormatUint(rc.lastRecord, 10),
		Reference:      reference,
		IdempotencyKey: key,
		// Whole seconds, so created_at reads as plain RFC 3339 everywhere.
		CreatedAt: now.UTC().Truncate(time.Second),
	}
	response, err := json.Marshal(rec)
	if err != nil {
		rc.lastRecord--
		return commitResult{}, err
	}
	rc.records = append(rc.records, rec)
	if dedupe {
		rc.keys[key] = keyEntry{Fingerprint: fingerprint, FirstSeen: now, Response: response}
	}
	if err := rc.saveLocked(); err != nil {
		rc.records = rc.records[:len(rc.records)-1]
		rc.lastRecord--
		if dedupe {
			if hadPrev {
				rc.keys[key] = prev
			} else {
				delete(rc.keys, key)
			}
		}
		return commitResult{}, err
	}
	return commitResult{response: response}, nil
}

// forgottenLocked reports whether key retention has run out for e: its age is
// more than the retention. The ledger retries with the same key only while the
// age is less, so the receiver still knows every key the ledger relies on.
func (rc *Receiver) forgottenLocked(e keyEntry, now time.Time) bool {
	return rc.keyRetention > 0 && now.Sub(e.FirstSeen) > rc.keyRetention
}

// lookupRecords is GET /records, filtered by the query parameters reference
// and idempotency_key when present, in creation order.
func (rc *Receiver) lookupRecords(w http.ResponseWriter, r *http.Request) {
	entry := logEntryFrom(r.Context())
	query := r.URL.Query()
	reference, byReference := query.Get("reference"), query.Has("reference")
	key, byKey := query.Get("idempotency_key"), query.Has("idempotency_key")
	entry.reference = reference

	fault, err := rc.faultFor(r, func(f Fault) bool { return f.Boundary() == Lookup }, reference)
	entry.fault = fault.Fault
	if err != nil {
		writeFaultError(w, err)
		return
	}
	switch fault.Fault {
	case FaultLookupFail:
		writeError(w, http.StatusServiceUnavailable, "lookup_unavailable", "lookup is unavailable")
		return
	case FaultLookup500:
		writeError(w, http.StatusInternalServerError, "internal_error", "internal error")
		return
	}

	rc.mu.Lock()
	found := []Record{}
	// A record shows in lookups only lookupLag after it was created, as in a search index that lags.
	visibleBefore := rc.now().Add(-rc.lookupLag)
	for _, rec := range rc.records {
		if rec.CreatedAt.After(visibleBefore) {
			continue
		}
		if (!byReference || rec.Reference == reference) && (!byKey || rec.IdempotencyKey == key) {
			found = append(found, rec)
		}
	}
	rc.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string][]Record{"records": found})
}

// reset is POST /control/reset: records, keys and queued faults are
// forgotten; the mode stays, and record ids keep counting up so that an id
// from before the reset never names a different record after it.
func (rc *Receiver) reset(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.records = nil
	rc.keys = make(map[string]keyEntry)
	rc.faults = nil
	if err := rc.saveLocked(); err != nil {
		rc.logger.Error("reset: saving failed", "err", err)
		writeError(w, http.StatusInternalServerError, "internal_error", "internal error")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "reset"})
}

// modeView is the body of GET and PUT /control/mode.
type modeView struct {
	Dedupe              Dedupe `json:"dedupe"`
	KeyRetentionSeconds int64  `json:"key_retention_seconds"`
	LookupLagSeconds    int64  `json:"lookup_lag_seconds"`
}

func (rc *Receiver) modeLocked() modeView {
	return modeView{Dedupe: rc.dedupe, KeyRetentionSeconds: int64(rc.keyRetention / time.Second),
		LookupLagSeconds: int64(rc.lookupLag / time.Second)}
}

func (rc *Receiver) getMode(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	view := rc.modeLocked()
	rc.mu.Unlock()
	writeJSON(w, http.StatusOK, view)
}

// putMode is PUT /control/mode; either field may be left out. A retention of
// 0 means keys are kept forever. Changing the retention applies to keys
// already remembered, since retention is checked when a key is used.
func (rc *Receiver) putMode(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Dedupe              *Dedupe `json:"dedupe"`
		KeyRetentionSeconds *int64  `json:"key_retention_seconds"`
		LookupLagSeconds    *int64  `json:"lookup_lag_seconds"`
	}
	if err := decodeControl(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_body", err.Error())
		return
	}
	if req.Dedupe != nil && !req.Dedupe.valid() {
		writeError(w, http.StatusBadRequest, "invalid_mode", fmt.Sprintf("dedupe must be %q or %q", DedupeKey, DedupeNone))
		return
	}
	if req.KeyRetentionSeconds != nil && *req.KeyRetentionSeconds < 0 {
		writeError(w, http.StatusBadRequest, "invalid_mode", "key_retention_seconds must be at least 0")
		return
	}
	if req.LookupLagSeconds != nil && *req.LookupLagSeconds < 0 {
		writeError(w, http.StatusBadRequest, "invalid_mode", "lookup_lag_seconds must be at least 0")
		return
	}
	rc.mu.Lock()
	if req.LookupLagSeconds != nil {
		rc.lookupLag = time.Duration(*req.LookupLagSeconds) * time.Second
	}
	if req.Dedupe != nil {
		rc.dedupe = *req.Dedupe
	}
	if req.KeyRetentionSeconds != nil {
		rc.keyRetention = time.Duration(*req.KeyRetentionSeconds) * time.Second
	}
	view := rc.modeLocked()
	rc.mu.Unlock()
	writeJSON(w, http.StatusOK, view)
}

func (rc *Receiver) listFaults(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.writeFaultsLocked(w)
}

func (rc *Receiver) queueFault(w http.ResponseWriter, r *http.Request) {
	var req faultRequest
	if err := decodeControl(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_body", err.Error())
		return
	}
	q, err := req.queued()
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_fault", err.Error())
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.faults = append(rc.faults, q)
	rc.writeFaultsLocked(w)
}

func (rc *Receiver) clearFaults(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.faults = nil
	rc.writeFaultsLocked(w)
}

func (rc *Receiver) writeFaultsLocked(w http.ResponseWriter) {
	faults := append([]queuedFault{}, rc.faults...)
	writeJSON(w, http.StatusOK, map[string][]queuedFault{"faults": faults})
}

// decodeControl decodes a control body strictly: an unknown field is more
// likely a typo in a test than something to ignore.
func decodeControl(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the body is not a valid control request: %v", err)
	}
	if dec.More() {
		return errors.New("the body has data after the JSON object")
	}
	return nil
}

// errorBody is every error response: a stable code, and a message for people.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Error: code, Message: message})
}

func writeFaultError(w http.ResponseWriter, err error) {
	code := "invalid_fault"
	if fe, ok := errors.AsType[*faultError](err); ok {
		code = fe.code
	}
	writeError(w, http.StatusBadRequest, code, err.Error())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	writeRaw(w, status, body)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(body)
	_, _ = w.Write([]byte{'\n'})
}
