//! Unit tests of the gexp functions, from the scenarios of 2.4.1's
//! `test/query/expression/Test*.java` (their inputs and asserted outputs).

use super::*;
