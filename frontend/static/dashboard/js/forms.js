// Form helpers: show API field errors next to their inputs, and read a form into JSON.
import { el } from "./core.js";

export function clearErrors(form) {
  for (const e of form.querySelectorAll(".field-error")) e.remove();
  for (const i of form.querySelectorAll("[aria-invalid]")) i.removeAttribute("aria-invalid");
  const box = form.querySelector(".error-box");
  if (box) { box.hidden = true; box.textContent = ""; }
}

/** errors: {field: [msg]}; fields without an input go to the form's error box. */
export function showErrors(form, errors, fallback) {
  clearErrors(form);
  const loose = [];
  for (const [name, msgs] of Object.entries(errors)) {
    const input = form.elements.namedItem(name);
    if (input && input.closest) {
      input.setAttribute("aria-invalid", "true");
      const label = input.closest("label") || input.parentElement;
      label.append(el("span", { class: "field-error", "data-field-error": name }, msgs.join(" ")));
    } else {
      loose.push(name === "non_field_errors" || name === "detail" ? msgs.join(" ") : `${name}: ${msgs.join(" ")}`);
    }
  }
  if (!Object.keys(errors).length && fallback) loose.push(fallback);
  const box = form.querySelector(".error-box");
  if (box && loose.length) { box.textContent = loose.join(" "); box.hidden = false; }
  const first = form.querySelector("[aria-invalid]");
  if (first) first.focus();
}

export function formJson(form) {
  const out = {};
  for (const input of form.elements) {
    if (!input.name) continue;
    if (input.type === "checkbox") out[input.name] = input.checked;
    else if (input.type === "number") { if (input.value !== "") out[input.name] = Number(input.value); }
    else if (input.value !== "") out[input.name] = input.value;
  }
  return out;
}

/** Client-side checks that mirror the server's (the server is still the authority). */
export function requiredErrors(form) {
  const errors = {};
  for (const input of form.elements) {
    if (input.required && !input.value.trim()) errors[input.name] = ["This field is required."];
    else if (input.type === "number" && input.value !== "" && input.min !== "" && Number(input.value) < Number(input.min)) {
      errors[input.name] = [`Must be at least ${input.min}.`];
    }
  }
  return errors;
}
