package console

// ZeroVisibility is zeroVisibility, for the tests' own receives.
var ZeroVisibility = zeroVisibility
