package main

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"syscall"
)

// secretFile is a file of secrets that the configuration names.
type secretFile struct {
	setting string // the key that names it, e.g. console.credential_file
	path    string
}

// consoleSecretFiles are the files of secrets `sqsonce console` reads with
// cfg: console.credential_file when a credential is on.
func consoleSecretFiles(cfg Config) []secretFile {
	if cfg.Console.Auth == ConsoleAuthNone || cfg.Console.CredentialFile == "" {
		return nil
	}
	return []secretFile{{"console.credential_file", cfg.Console.CredentialFile}}
}

// ingestSecretFiles are the files of secrets `sqsonce ingest` reads with
// cfg: each [[ingest.source]]'s secret_file.
func ingestSecretFiles(cfg Config) []secretFile {
	var files []secretFile
	for _, src := range cfg.Ingest.Source {
		if src.SecretFile != "" {
			files = append(files, secretFile{fmt.Sprintf("ingest.source %q secret_file", src.Name), src.SecretFile})
		}
	}
	return files
}

// exposedSecret is a file of secrets that users other than sqsonce's may
// read, and how.
type exposedSecret struct {
	secretFile
	mode fs.FileMode // its permission bits
	who  string      // who else has access: every user of the host, or its group
}

func (e exposedSecret) String() string {
	return fmt.Sprintf("%s %s has mode %04o, open to %s: make it 0600 or 0400 (a Kubernetes Secret volume: defaultMode: 0400)",
		e.setting, e.path, e.mode, e.who)
}

// exposedSecrets returns the files among files that other users may read
// or change. The rule is libpq's for a client's private key: no access at
// all for others, and access for the group only to read and only when root
// owns the file (a file the system manages for a group the service belongs
// to, as a Kubernetes Secret volume with an fsGroup is: root's, 0440). A
// file that cannot be read is left to the command that reads it, which
// says why.
func exposedSecrets(files []secretFile) []exposedSecret {
	var out []exposedSecret
	for _, f := range files {
		info, err := os.Stat(f.path)
		if err != nil {
			continue
		}
		perm := info.Mode().Perm()
		rootOwned := false
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			rootOwned = st.Uid == 0
		}
		switch {
		case perm&0o007 != 0:
			out = append(out, exposedSecret{f, perm, "every user of the host"})
		case perm&0o070 != 0 && (!rootOwned || perm&0o030 != 0):
			out = append(out, exposedSecret{f, perm, "its group"})
		}
	}
	return out
}

// warnExposedSecrets logs a warning for each of files that other users
// may read (see exposedSecrets). It does not refuse them: a Kubernetes
// Secret volume is 0644 unless its defaultMode says otherwise.
func warnExposedSecrets(log *slog.Logger, files []secretFile) {
	for _, e := range exposedSecrets(files) {
		log.Warn("a file of secrets is open to other users: make it 0600 or 0400 (a Kubernetes Secret volume: defaultMode: 0400)",
			"setting", e.setting, "file", e.path, "mode", fmt.Sprintf("%04o", e.mode), "open_to", e.who)
	}
}
