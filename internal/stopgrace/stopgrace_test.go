package stopgrace

import (
	"context"
	"testing"
	"time"
)

type key struct{}

// TestExtendOutlivesTheStopByTheGrace: the work's context keeps ctx's values, is still alive right after
// ctx ends, and ends once the grace has passed; done ends it at once, with or without a stop.
func TestExtendOutlivesTheStopByTheGrace(t *testing.T) {
	ctx, stop := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	work, done := Extend(ctx, 50*time.Millisecond)
	defer done()
	if work.Value(key{}) != "v" {
		t.Error("the work's context lost ctx's values")
	}
	stop()
	select {
	case <-work.Done():
		t.Fatal("the work's context ended with the stop, not after the grace")
	case <-time.After(10 * time.Millisecond):
	}
	select {
	case <-work.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the work's context did not end after the grace")
	}

	work, done = Extend(context.Background(), time.Hour)
	done()
	if work.Err() == nil {
		t.Error("done did not end the work's context")
	}
}

// TestDetachedOutlivesItsParentWithinRecordTimeout: a record's context is alive after its parent ended,
// keeps its values, and has a deadline RecordTimeout away.
func TestDetachedOutlivesItsParentWithinRecordTimeout(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	cancel()
	ctx, release := Detached(parent)
	defer release()
	if ctx.Err() != nil || ctx.Value(key{}) != "v" {
		t.Fatalf("detached context: err %v, value %v", ctx.Err(), ctx.Value(key{}))
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > RecordTimeout || time.Until(d) < RecordTimeout-time.Second {
		t.Errorf("deadline %v (ok %v); want about %v from now", d, ok, RecordTimeout)
	}
}
