package import Hummingbird

/// The service's router: the API's error bodies around everything, the access rules in
/// front of every route, the API under `/api/v1`, and the dashboard at `/`.
@available(macOS 14, iOS 17, tvOS 17, *)
package enum ServiceRouter {
    package static func make(core: ServiceCore, rules: AccessRulesBox, dashboard: DashboardFiles = DashboardFiles())
        -> Router<BasicRequestContext>
    {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: APIErrorMiddleware())
        router.add(middleware: AccessMiddleware(rules: rules, sessions: core.sessions))
        let api = router.group("api/v1")
        DownloadsAPI(core: core).addRoutes(to: api)
        SessionAPI(core: core, rules: rules).addRoutes(to: api)
        SettingsAPI(core: core).addRoutes(to: api)
        SyncsAPI(core: core).addRoutes(to: api)
        EventsAPI(core: core).addRoutes(to: api)
        dashboard.addRoutes(to: router)
        return router
    }
}
