package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// snapshot is the content of receiver.json in the data dir.
type snapshot struct {
	Version    int                 `json:"version"`
	LastRecord uint64              `json:"last_record"`
	Records    []Record            `json:"records"`
	Keys       map[string]keyEntry `json:"keys"`
}

const snapshotVersion = 1

// load reads dir's receiver.json, if any, and remembers where to save.
func (rc *Receiver) load(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sandbox: data dir: %w", err)
	}
	rc.dataPath = filepath.Join(dir, dataFile)
	data, err := os.ReadFile(rc.dataPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox: reading records: %w", err)
	}
	var snap snapshot
	if err := json.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("sandbox: reading %s: %w", rc.dataPath, err)
	}
	if snap.Version != snapshotVersion {
		return fmt.Errorf("sandbox: %s has version %d, this receiver reads version %d", rc.dataPath, snap.Version, snapshotVersion)
	}
	rc.records = snap.Records
	rc.lastRecord = snap.LastRecord
	if snap.Keys != nil {
		rc.keys = snap.Keys
	}
	return nil
}

// saveLocked writes the records and keys to the data dir, if there is one.
// It writes a temporary file and renames it over the old one, so a crash
// leaves either the old or the new content, never half of one.
func (rc *Receiver) saveLocked() error {
	if rc.dataPath == "" {
		return nil
	}
	data, err := json.Marshal(snapshot{Version: snapshotVersion, LastRecord: rc.lastRecord, Records: rc.records, Keys: rc.keys})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(rc.dataPath), dataFile+".*.tmp")
	if err != nil {
		return fmt.Errorf("sandbox: saving records: %w", err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), rc.dataPath)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("sandbox: saving records: %w", err)
	}
	return nil
}
