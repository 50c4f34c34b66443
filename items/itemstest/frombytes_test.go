package itemstest

import "testing"

// TestHistoryDroppedSeed: the seed the stores' fuzz targets start from builds an item with a non-zero
// history_dropped, so that their round trips cover it whatever the fuzzer finds.
func TestHistoryDroppedSeed(t *testing.T) {
	if it := ItemFromBytes(HistoryDroppedSeed, nil); it.HistoryDropped == 0 || len(it.Attempts) == 0 {
		t.Fatalf("HistoryDroppedSeed builds history_dropped %d, %d attempts", it.HistoryDropped, len(it.Attempts))
	}
}
