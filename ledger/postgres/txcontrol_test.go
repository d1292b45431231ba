package postgres

import "testing"

func TestTransactionControl(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sql, want string // want "" when the SQL controls no transaction
	}{
		{"COMMIT", "COMMIT"},
		{"commit", "COMMIT"},
		{"  \n\tCoMmIt work", "COMMIT"},
		{"END", "END"},
		{"end transaction", "END"},
		{"ABORT", "ABORT"},
		{"ROLLBACK", "ROLLBACK"},
		{"rollback to savepoint s", "ROLLBACK TO"},
		{"ROLLBACK PREPARED 'x'", "ROLLBACK PREPARED"},
		{"COMMIT PREPARED 'x'", "COMMIT"},
		{"BEGIN", "BEGIN"},
		{"start transaction isolation level serializable", "START TRANSACTION"},
		{"SAVEPOINT s", "SAVEPOINT"},
		{"release s", "RELEASE"},
		{"RELEASE SAVEPOINT s", "RELEASE"},
		{"PREPARE TRANSACTION 'x'", "PREPARE TRANSACTION"},
		{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET TRANSACTION"},
		{"set local transaction read only", "SET TRANSACTION"},
		{"SET SESSION TRANSACTION READ ONLY", "SET TRANSACTION"},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "SET SESSION CHARACTERISTICS"},
		{"SET LOCAL SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "SET SESSION CHARACTERISTICS"},
		{"SET transaction_isolation = 'serializable'", "SET TRANSACTION_ISOLATION"},
		{"set local Transaction_Read_Only to on", "SET TRANSACTION_READ_ONLY"},
		{"-- a comment\nCOMMIT", "COMMIT"},
		{"/* a comment */ COMMIT", "COMMIT"},
		{"/* nested /* comment */ still a comment */COMMIT", "COMMIT"},
		{"/* COMMIT */ SELECT 1", ""},
		{"-- COMMIT\nSELECT 1", ""},
		{"((COMMIT))", "COMMIT"},
		{"( /* x */ ROLLBACK)", "ROLLBACK"},
		{"INSERT INTO t VALUES (1); COMMIT", "COMMIT"},
		{"INSERT INTO t VALUES (1);COMMIT;", "COMMIT"},
		{"INSERT INTO t VALUES ('a;b'); commit", "COMMIT"},
		{";;  ;rollback", "ROLLBACK"},
		{"SELECT 'it''s; COMMIT'", ""},
		{`SELECT E'it\'s; COMMIT'`, ""},
		{`SELECT 'a\'; COMMIT; --'`, "COMMIT"}, // standard strings: the backslash is itself
		{`SELECT e'\\'; COMMIT`, "COMMIT"},
		{`SELECT "odd;""name" FROM t; COMMIT`, "COMMIT"},
		{`SELECT "x; COMMIT"`, ""},
		{"SELECT $$; COMMIT$$", ""},
		{"SELECT $tag$ $$; COMMIT $tag$", ""},
		{"SELECT $tag$ x $tag$; COMMIT", "COMMIT"},
		{"SELECT $1, $2; COMMIT", "COMMIT"},
		{"SELECT a$b FROM t; COMMIT", "COMMIT"},
		{"SELECT a$b$ FROM t; COMMIT", "COMMIT"},
		{"DO $$BEGIN COMMIT; END$$", ""},
		{"DO $body$ BEGIN COMMIT; END $body$; SELECT 1", ""},
		{"INSERT INTO t (commit) VALUES (1)", ""},
		{"UPDATE t SET begin = 1", ""},
		{"SELECT 1 AS commit", ""},
		{"SET LOCAL statement_timeout = 1", ""},
		{"SET search_path = transaction", ""},
		{"PREPARE p AS SELECT 1", ""},
		{"INSERT INTO effects (key, owner) VALUES ($1, $2)", ""},
		{"WITH x AS (SELECT 1) SELECT * FROM x", ""},
		{"", ""},
		{"   ", ""},
		{"SELECT 'unterminated", ""},
		{"/* unterminated comment COMMIT", ""},
		{"SELECT $$ unterminated; COMMIT", ""},
		{"commitment", ""},
		{"committed", ""},
		{"_COMMIT", ""},
		{"COMMIT_x", ""},
	} {
		got, ok := transactionControl(tc.sql)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("transactionControl(%q) = %q, %v; want %q", tc.sql, got, ok, tc.want)
		}
	}
}

// FuzzTransactionControl checks that the scan ends, without a panic, on any
// input.
func FuzzTransactionControl(f *testing.F) {
	for _, s := range []string{"SELECT 1", "SELECT 'a'", "SELECT $$x$$", "/* c */ SELECT 1", "SELECT e'\\''"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		transactionControl(sql)
	})
}
