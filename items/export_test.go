package items

// NeedsPersonByHistory is whether an item's history leaves it needing a person, as the series read it
// (seriesEvents): it must agree with the ledger's own NeedsPerson.
func NeedsPersonByHistory(it *Item) bool { return it.seriesEvents(nil) }
