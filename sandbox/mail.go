package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/mail"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

// The SMTP destination: a mail server that keeps every message it accepts and counts them per subject,
// so that a test of a workflow's Send Email node compares what the ledger believes with the messages
// that exist. It misbehaves on request at the one boundary where a sender cannot know the outcome: after
// the message's data has arrived (and is kept) but before the reply. It also refuses messages the way
// real servers do: 421 and 451 (try later) and 550 (never); a refused message is not kept.

// MailFault is a fault of the SMTP destination.
type MailFault string

// The mail faults, applied to the next messages' DATA.
const (
	// MailDropAfterData keeps the message, then closes the connection before the reply: the sender
	// cannot tell that the message exists.
	MailDropAfterData MailFault = "drop_after_data"
	// MailReject421 answers 421 (service not available, closing) and keeps nothing.
	MailReject421 MailFault = "reject_421"
	// MailReject451 answers 451 (local error, try again later) and keeps nothing.
	MailReject451 MailFault = "reject_451"
	// MailReject550 answers 550 (mailbox unavailable) and keeps nothing.
	MailReject550 MailFault = "reject_550"
)

func (f MailFault) valid() bool {
	return f == MailDropAfterData || f == MailReject421 || f == MailReject451 || f == MailReject550
}

// Message is one message the SMTP destination accepted.
type Message struct {
	From      string    `json:"from"`
	To        []string  `json:"to"`
	Subject   string    `json:"subject"`
	MessageID string    `json:"message_id"`
	At        time.Time `json:"at"`
	// Dropped is true when the connection was dropped before the reply (the sender saw no answer).
	Dropped bool `json:"dropped,omitempty"`
}

// MailCounts is the answer of GET /mail: every message kept, and how many per subject.
type MailCounts struct {
	Messages  int            `json:"messages"`
	BySubject map[string]int `json:"by_subject"`
	List      []Message      `json:"list"`
}

type mailFault struct {
	Fault MailFault `json:"fault"`
	// Count is how many messages the fault applies to (default 1).
	Count int `json:"count"`
}

// mailbox holds the SMTP destination's messages and queued faults. Safe for concurrent use.
type mailbox struct {
	mu       sync.Mutex
	now      func() time.Time
	messages []Message
	faults   []mailFault
}

func (mb *mailbox) counts() MailCounts {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	c := MailCounts{Messages: len(mb.messages), BySubject: map[string]int{}, List: append([]Message{}, mb.messages...)}
	for _, m := range mb.messages {
		c.BySubject[m.Subject]++
	}
	return c
}

// takeFault returns the fault for the next message, if one is queued.
func (mb *mailbox) takeFault() MailFault {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if len(mb.faults) == 0 {
		return ""
	}
	f := mb.faults[0].Fault
	if mb.faults[0].Count--; mb.faults[0].Count <= 0 {
		mb.faults = mb.faults[1:]
	}
	return f
}

func (mb *mailbox) keep(m Message) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	m.At = mb.now().UTC()
	mb.messages = append(mb.messages, m)
}

// ServeSMTP answers SMTP on ln until ctx is done. Messages are kept in memory (they are counted, not
// delivered); no authentication and no TLS are offered, and any credentials a client sends are accepted,
// as a local sink should.
func (rc *Receiver) ServeSMTP(ctx context.Context, ln net.Listener) error {
	s := smtp.NewServer(mailBackend{rc: rc})
	s.Domain = "sandbox.localhost"
	s.ReadTimeout, s.WriteTimeout = time.Minute, time.Minute
	s.MaxMessageBytes = 1 << 20
	s.MaxRecipients = 50
	s.AllowInsecureAuth = true
	s.ErrorLog = smtpLogger{rc: rc}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("sandbox: smtp: %w", err)
	case <-ctx.Done():
	}
	err := s.Close()
	<-served
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("sandbox: smtp shutdown: %w", err)
	}
	return nil
}

type smtpLogger struct{ rc *Receiver }

func (l smtpLogger) Printf(format string, v ...any) { l.rc.logger.Warn(fmt.Sprintf(format, v...)) }
func (l smtpLogger) Println(v ...any)               { l.rc.logger.Warn(fmt.Sprint(v...)) }

type mailBackend struct{ rc *Receiver }

func (b mailBackend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &mailSession{rc: b.rc, conn: c}, nil
}

type mailSession struct {
	rc   *Receiver
	conn *smtp.Conn
	from string
	to   []string
}

func (s *mailSession) Reset()        { s.from, s.to = "", nil }
func (s *mailSession) Logout() error { return nil }

func (s *mailSession) Mail(from string, _ *smtp.MailOptions) error {
	s.from = from
	return nil
}

func (s *mailSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}

// Data reads the whole message first, so that a refusal comes where real servers give it: after the
// data, in the reply to it.
func (s *mailSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m := Message{From: s.from, To: append([]string{}, s.to...)}
	if parsed, err := mail.ReadMessage(bytes.NewReader(raw)); err == nil {
		dec := new(mime.WordDecoder)
		m.Subject = parsed.Header.Get("Subject")
		if d, err := dec.DecodeHeader(m.Subject); err == nil {
			m.Subject = d
		}
		m.MessageID = parsed.Header.Get("Message-ID")
	}
	fault := s.rc.mail.takeFault()
	switch fault {
	case MailReject421:
		return &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 3, 2}, Message: "sandbox: service not available, closing"}
	case MailReject451:
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "sandbox: local error, try again later"}
	case MailReject550:
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "sandbox: mailbox unavailable"}
	case MailDropAfterData:
		m.Dropped = true
		s.rc.mail.keep(m)
		s.rc.logger.Info("mail kept, connection dropped before the reply", "fault", fault, "subject", m.Subject)
		_ = s.conn.Conn().Close()
		return errors.New("sandbox: connection dropped")
	}
	s.rc.mail.keep(m)
	return nil
}

func (rc *Receiver) getMail(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, rc.mail.counts())
}

func (rc *Receiver) queueMailFault(w http.ResponseWriter, r *http.Request) {
	var f mailFault
	if err := decodeControl(w, r, &f); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_body", err.Error())
		return
	}
	if !f.Fault.valid() {
		writeError(w, http.StatusBadRequest, "invalid_fault", fmt.Sprintf("fault must be one of %s, %s, %s, %s", MailDropAfterData, MailReject421, MailReject451, MailReject550))
		return
	}
	if f.Count < 0 {
		writeError(w, http.StatusBadRequest, "invalid_fault", "count must not be negative")
		return
	}
	if f.Count == 0 {
		f.Count = 1
	}
	rc.mail.mu.Lock()
	rc.mail.faults = append(rc.mail.faults, f)
	queued := append([]mailFault{}, rc.mail.faults...)
	rc.mail.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"faults": queued})
}

func (rc *Receiver) clearMail(w http.ResponseWriter, r *http.Request) {
	rc.mail.mu.Lock()
	rc.mail.faults, rc.mail.messages = nil, nil
	rc.mail.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
