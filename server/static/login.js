// datahunt login page: posts the API token once to /session, which answers with an HttpOnly session cookie.
// The token is also kept in this tab's sessionStorage, as the review page keeps it for approvals and exports.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const form = document.querySelector("#login");
  const flash = document.querySelector("#flash");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = document.querySelector("#login-token").value.trim();
    const response = await fetch("session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token }),
    });
    if (response.ok) {
      window.sessionStorage.setItem("datahunt.token", token);
      window.location.reload();
      return;
    }
    const data = await response.json().catch(() => ({}));
    flash.textContent = `${response.status}: ${typeof data.detail === "string" ? data.detail : "login refused"}`;
    flash.className = "error";
  });
});
