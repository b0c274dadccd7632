// The public surface of the files module: other modules and processes import from here only.
export { FILE_PURPOSES, type FileDescription, type FileObject, type FilePurpose, FileStore, FileTooLargeError } from "./file-store.js";
