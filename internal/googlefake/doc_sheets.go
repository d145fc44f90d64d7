// # Sheets fidelity
//
// The Sheets emulator is at least as strict as Google's documents on what
// mailroom relies on; where a document is vague, it is stricter. Each
// behaviour, the document it comes from, and the test that proves it with
// the official client (google.golang.org/api/sheets/v4):
//
//	behaviour                                     | Google's document                                        | test
//	----------------------------------------------|----------------------------------------------------------|--------------------------------------
//	a new sheet is 1,000 rows x 26 columns        | SheetProperties gridProperties                           | TestSheetsGridRefusesOutside
//	  (Options.SheetsGridRows/Columns, SetGridSize)|   (reference/rest/v4/spreadsheets/sheets); the size as   |
//	                                               |   Google's answers show it (github.com/burnash/gspread   |
//	                                               |   issue 371: 26 columns; cloudfour/lighthouse-parade     |
//	                                               |   issue 151: "Max rows: 1000")                           |
//	values.update / values.batchUpdate past the   | reference/rest/v4/spreadsheets.values/update; the 400    | TestSheetsGridRefusesOutside
//	  grid: 400 INVALID_ARGUMENT "Range ('S'!A1001:| INVALID_ARGUMENT "Range (...) exceeds grid limits. Max   |
//	  E1001) exceeds grid limits. Max rows: 1000,  |   rows: N, max columns: M" as Google answers it          |
//	  max columns: 26"; a batch is all or nothing  |   (home-assistant/core issue 104198, lighthouse-parade   |
//	                                               |   issue 151)                                             |
//	values.get with any cell past the grid: the   | reference/rest/v4/spreadsheets.values/get (silent on a   | TestSheetsGridRefusesOutside
//	  same 400 (a range crossing the edge too);    |   range past the grid: the stricter reading); reads past |
//	  an open end ("A5:E", "Sheet1") reads to the  |   it answered 400 "exceeds grid limits" (airbytehq/      |
//	  edge                                         |   airbyte issue 1740, values.batchGet; nithinmurali/     |
//	                                               |   pygsheets issue 528, values.get); guides/concepts (A1  |
//	                                               |   notation: an open end runs to the sheet's last row)    |
//	values.append grows the grid (rows, columns)  | reference/rest/v4/spreadsheets.values/append ("the input | TestSheetsAppendGrowsGrid
//	                                               |   data will be appended ... new rows or columns")        |
//	spreadsheets.batchUpdate: appendDimension,    | reference/rest/v4/spreadsheets/request#AppendDimension-  | TestSheetsBatchUpdateGrid
//	  insertDimension, updateSheetProperties with  |   Request, #InsertDimensionRequest,                      |
//	  its required field mask; validated whole     |   #UpdateSheetPropertiesRequest; spreadsheets/batchUpdate|
//	  before any is applied; other requests: 400   |   ("if any request is not valid ... nothing applied")    |
//	at most 10,000,000 cells per spreadsheet over | Drive help "Files you can store in Google Drive"         | TestSheetsCellCap
//	  all sheets: a grow past it is 400 "This      |   (support.google.com/drive/answer/37603: 10 million     |
//	  action would increase the number of cells in |   cells, 18,278 columns); the 400 text as Google answers |
//	  the workbook above the limit of 10000000     |   it                                                     |
//	  cells."                                      |                                                          |
//	60 reads and 60 writes a minute per user, 300 | developers.google.com/workspace/sheets/api/limits        | TestSheetsReadAndProjectQuotas,
//	  and 300 per project, over any rolling minute |   ("Per minute per user per project 60", "Per minute per | TestSheetsWriteQuota
//	  (stricter than a refill each minute); over   |   project 300", reads and writes apart; over: "429: Too  |
//	  either: 429 RESOURCE_EXHAUSTED; every request|   many requests"; get is a read, update/clear writes);   |
//	  counts, refused ones too, against the        |   the page counts requests, not accepted ones: the       |
//	  account's window and the project's           |   stricter reading                                       |
//	no retry time is named in a 429               | the same page: "use an exponential backoff algorithm"    | TestSheetsReadAndProjectQuotas
//	a deleted spreadsheet: 404 NOT_FOUND          | reference/rest/v4/spreadsheets/get; Drive trash          | TestSheetsGoneMissingTabAndRevoked
//	a renamed or deleted tab: 400 "Unable to parse| reference/rest/v4/spreadsheets.values (A1 notation)      | TestSheetsGoneMissingTabAndRevoked
//	  range: Tab!A1:C3"                            |                                                          |
//	access taken away (Unshare): 403              | Drive sharing; Sheets API error model (PERMISSION_DENIED)| TestSheetsGoneMissingTabAndRevoked
//	  PERMISSION_DENIED until Share                |                                                          |
//
// Test controls: Sheets.SetGridSize, GridSize, Fill (rows typed into a
// sheet in use, no quota spent), DeleteSpreadsheet,
// RenameSheet (an empty new title deletes the tab), AddSheet, Share and
// Unshare, and the Options above.
package googlefake
