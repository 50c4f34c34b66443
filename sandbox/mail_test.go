package sandbox_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/smtp"
	"net/textproto"
	"testing"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

// startMail serves the receiver's SMTP destination on a free port and returns its address.
func startMail(t *testing.T, s *receiver) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.rc.ServeSMTP(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeSMTP returned %v after its context was cancelled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeSMTP did not stop")
		}
	})
	return ln.Addr().String()
}

// sendMail sends one message as nodemailer does (no auth, no TLS on a local sink).
func sendMail(addr, subject string) error {
	msg := "From: billing@example.com\r\nTo: c-19@example.com\r\nSubject: " + subject +
		"\r\nMessage-ID: <" + subject + "@test>\r\n\r\nReminder for invoice 742.\r\n"
	return smtp.SendMail(addr, nil, "billing@example.com", []string{"c-19@example.com"}, []byte(msg))
}

func (s *receiver) mail() sandbox.MailCounts {
	s.t.Helper()
	var c sandbox.MailCounts
	s.send(http.MethodGet, "/mail", "", nil).json(s.t, &c)
	return c
}

func TestMailIsKeptAndCountedPerSubject(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	addr := startMail(t, s)
	for _, subj := range []string{"invoice-742", "invoice-742", "invoice-743"} {
		if err := sendMail(addr, subj); err != nil {
			t.Fatalf("send %s: %v", subj, err)
		}
	}
	c := s.mail()
	if c.Messages != 3 || c.BySubject["invoice-742"] != 2 || c.BySubject["invoice-743"] != 1 {
		t.Errorf("mail = %+v, want 2 for invoice-742 and 1 for invoice-743", c)
	}
	if c.List[0].MessageID != "<invoice-742@test>" || c.List[0].To[0] != "c-19@example.com" {
		t.Errorf("first message = %+v", c.List[0])
	}
}

func TestMailFaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		fault string
		code  int // the reply the client gets; 0: none (the connection drops)
		kept  bool
	}{
		{"reject_421", 421, false},
		{"reject_451", 451, false},
		{"reject_550", 550, false},
		{"drop_after_data", 0, true},
	} {
		t.Run(c.fault, func(t *testing.T) {
			t.Parallel()
			s := startReceiver(t, sandbox.Config{})
			addr := startMail(t, s)
			s.control(http.MethodPost, "/control/mail-faults", `{"fault":"`+c.fault+`"}`)
			err := sendMail(addr, "invoice-742")
			var perr *textproto.Error
			switch {
			case c.code != 0 && (!errors.As(err, &perr) || perr.Code != c.code):
				t.Fatalf("send: %v, want the reply %d", err, c.code)
			case c.code == 0 && (err == nil || errors.As(err, &perr)):
				t.Fatalf("send: %v, want the connection dropped without a reply", err)
			}
			if got := s.mail(); (got.Messages == 1) != c.kept || (c.kept && !got.List[0].Dropped) {
				t.Errorf("after %s: %+v, kept want %v", c.fault, got, c.kept)
			}
			// The fault applied once: the next message goes through.
			if err := sendMail(addr, "invoice-743"); err != nil {
				t.Fatalf("the next message: %v", err)
			}
			if got := s.mail(); got.BySubject["invoice-743"] != 1 {
				t.Errorf("the next message was not kept: %+v", got)
			}
		})
	}
}

func TestMailFaultRefusals(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	for _, body := range []string{`{"fault":"explode"}`, `{"fault":"reject_451","count":-1}`, `{"fault":"reject_451","cuont":2}`} {
		if r := s.send(http.MethodPost, "/control/mail-faults", body, nil); r.status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", body, r.status)
		}
	}
}
