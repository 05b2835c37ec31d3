;;; One editing session in a real Emacs with Eglot, run in batch by test_editor_emacs.py:
;;; start `torchdevlint server` as docs/editors.md configures it, wait for the findings in
;;; Flymake, apply the preferred quick fix on line 5, see its finding go, and write what it
;;; saw as JSON to $TORCHDEVLINT_RESULT.

;; Distribution packages of Eglot (Debian's elpa-eglot) live outside `-Q''s load path.
(dolist (dir (file-expand-wildcards "/usr/share/emacs/site-lisp/elpa/*"))
  (add-to-list 'load-path dir))
(require 'eglot)
(require 'json)

(setq eglot-sync-connect t)
;; The line docs/editors.md gives, with the command the test runs.
(add-to-list 'eglot-server-programs
             `(python-mode . ,(append (json-read-from-string (getenv "TORCHDEVLINT_SERVER")) nil)))

(defvar seen nil)
(defun note (key value) (push (cons key value) seen))
(defun json-bool (value) (if value t :json-false))

(defun wait-until (predicate)
  "Run the event loop until PREDICATE holds (Flymake asked to report meanwhile), or 20 s."
  (let ((deadline (+ (float-time) 20)) (done nil))
    (while (and (not (setq done (funcall predicate))) (< (float-time) deadline))
      (accept-process-output nil 0.05)
      (ignore-errors (flymake-start)))
    done))

(defun shown-diagnostics ()
  "Each Flymake diagnostic as [line (0-based) column (characters) text]."
  (vconcat
   (mapcar (lambda (diagnostic)
             (save-excursion
               (goto-char (flymake-diagnostic-beg diagnostic))
               (vector (1- (line-number-at-pos)) (current-column) (flymake-diagnostic-text diagnostic))))
           (sort (flymake-diagnostics)
                 (lambda (a b) (< (flymake-diagnostic-beg a) (flymake-diagnostic-beg b)))))))

(condition-case problem
    (progn
      (find-file "train.py")
      (python-mode)
      (apply #'eglot (eglot--guess-contact))
      (note "published" (json-bool (wait-until (lambda () (>= (length (flymake-diagnostics)) 2)))))
      (note "diagnostics" (shown-diagnostics))
      (let* ((line-5 (save-excursion (goto-char (point-min)) (forward-line 4) (point)))
             (position (eglot--pos-to-lsp-position line-5))
             (actions (jsonrpc-request (eglot--current-server-or-lose) :textDocument/codeAction
                                       (list :textDocument (eglot--TextDocumentIdentifier)
                                             :range (list :start position :end position)
                                             :context (list :diagnostics []))))
             (preferred (seq-find (lambda (action) (eq (plist-get action :isPreferred) t)) actions)))
        (note "actions" (vconcat (mapcar (lambda (action) (plist-get action :title)) actions)))
        (eglot--apply-workspace-edit (plist-get preferred :edit))
        ;; Eglot sends changes from an idle timer, which never fires in batch mode.
        (eglot--signal-textDocument/didChange)
        (note "fixed_line" (save-excursion (goto-char line-5)
                                           (buffer-substring-no-properties (point) (line-end-position)))))
      (note "fix_cleared" (json-bool (wait-until (lambda () (= (length (flymake-diagnostics)) 1))))))
  (error (note "error" (format "%S" problem))))

(with-temp-file (getenv "TORCHDEVLINT_RESULT") (insert (json-encode seen)))
(kill-emacs 0)
