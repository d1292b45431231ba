package main

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// awsSecretVars are the variables through which the AWS SDK for Go v2 finds
// this process's credentials: the keys themselves (and the older names it
// still reads for them), and the tokens, files, directories and endpoints
// that yield them (a container's credentials endpoint and its token, a web
// identity token, the shared credentials and config files, which may both
// hold keys, and the cache of `aws login` sessions). AWS_SECURITY_TOKEN is
// the older SDKs' and tools' name for the session token.
//
// Sources: aws-sdk-go-v2 config/env_config.go (NewEnvConfig, at
// config v1.33.18) and config/resolve_credentials.go
// (AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, AWS_LOGIN_CACHE_DIRECTORY);
// https://docs.aws.amazon.com/sdkref/latest/guide/feature-static-credentials.html,
// https://docs.aws.amazon.com/sdkref/latest/guide/feature-container-credentials.html,
// https://docs.aws.amazon.com/sdkref/latest/guide/feature-assume-role-credentials.html,
// https://docs.aws.amazon.com/sdkref/latest/guide/file-location.html.
var awsSecretVars = []string{
	"AWS_ACCESS_KEY_ID",
	"AWS_ACCESS_KEY",
	"AWS_SECRET_ACCESS_KEY",
	"AWS_SECRET_KEY",
	"AWS_SESSION_TOKEN",
	"AWS_SECURITY_TOKEN",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
	"AWS_WEB_IDENTITY_TOKEN_FILE",
	"AWS_SHARED_CREDENTIALS_FILE",
	"AWS_CONFIG_FILE",
	"AWS_LOGIN_CACHE_DIRECTORY",
}

// pgSecretParams are the connection parameters of PostgreSQL's client (pgx,
// as libpq) that hold a secret or name a file of secrets: the password, the
// password file, the passphrase of the client's TLS key, the key itself,
// and the service file, which may hold any parameter, a password among
// them. pgSecretVars are the variables that set them.
//
// Sources: pgx pgconn/config.go (parseEnvSettings and configTLS, at
// v5.12.0); https://www.postgresql.org/docs/current/libpq-envars.html,
// https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS,
// https://www.postgresql.org/docs/current/libpq-pgservice.html.
var (
	pgSecretParams = []string{"password", "passfile", "sslpassword", "sslkey", "servicefile"}
	pgSecretVars   = []string{"PGPASSWORD", "PGPASSFILE", "PGSSLPASSWORD", "PGSSLKEY", "PGSERVICEFILE"}
)

// ownSecrets names the variables that hold secrets sqsonce itself uses
// with cfg, whichever of them are set: the AWS SDK's credentials
// (awsSecretVars), PostgreSQL's (pgSecretVars), the OTLP exporter's
// headers, the webhook secrets each [[ingest.source]] names in secret_env,
// the console's credential_env, and SQSONCE_LEDGER_URL when the ledger URL
// carries a secret (ledgerURLSecret). An exec handler's command does not
// inherit them unless handler.env names them one by one.
func ownSecrets(cfg Config) []string {
	names := slices.Concat(awsSecretVars, pgSecretVars, []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"})
	add := func(name string) {
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, src := range cfg.Ingest.Source {
		add(src.SecretEnv)
	}
	add(cfg.Console.CredentialEnv)
	if ledgerURLSecret(cfg.Ledger.URL) {
		add(envPrefix + "LEDGER_URL")
	}
	return names
}

// secretPair finds a secret parameter (pgSecretParams) in a connection
// string of key=value pairs.
var secretPair = regexp.MustCompile(`(^|\s)(` + strings.Join(pgSecretParams, "|") + `)\s*=`)

// ledgerURLSecret reports whether a PostgreSQL connection string carries a
// secret: a password in a URL's user information, or one of
// pgSecretParams as a URL parameter or a key=value pair.
func ledgerURLSecret(conn string) bool {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return true // cannot tell: the safe side
		}
		if _, set := u.User.Password(); set {
			return true
		}
		q := u.Query()
		return slices.ContainsFunc(pgSecretParams, q.Has)
	}
	return secretPair.MatchString(conn)
}
