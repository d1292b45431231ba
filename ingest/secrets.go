package ingest

import (
	"bytes"
	"fmt"
	"strings"
)

// SecretsFromFile reads secrets from the contents of a secret file: one
// secret a line, surrounding whitespace (and a UTF-8 byte order mark)
// ignored, blank lines and lines starting with # skipped. Whitespace inside
// a line is part of the secret, as GitHub secrets may hold spaces; a secret
// cannot start with #. It returns an error wrapping ErrInvalidConfig when
// the file holds no secret. The secrets returned do not share memory with
// data.
func SecretsFromFile(data []byte) ([][]byte, error) {
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	var secrets [][]byte
	for line := range bytes.Lines(data) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		secrets = append(secrets, bytes.Clone(line))
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: no secret in the secret file (one a line, # for comments)", ErrInvalidConfig)
	}
	return secrets, nil
}

// SecretsFromEnv reads secrets from an environment variable's value:
// separated by any whitespace, newlines included. It has no comments, and a
// secret holding whitespace has to come from a file. It returns an error
// wrapping ErrInvalidConfig when the value holds no secret.
func SecretsFromEnv(value string) ([][]byte, error) {
	var secrets [][]byte
	for s := range strings.FieldsSeq(value) {
		secrets = append(secrets, []byte(s))
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: no secret in the environment variable (whitespace-separated)", ErrInvalidConfig)
	}
	return secrets, nil
}
