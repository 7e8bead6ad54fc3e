package import Hummingbird

/// The service's router: the API's error bodies around everything, the access rules in
/// front of every route, and the routes under `/api/v1`.
@available(macOS 14, iOS 17, tvOS 17, *)
package enum ServiceRouter {
    package static func make(downloads: DownloadsAPI, rules: AccessRules) -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: APIErrorMiddleware())
        router.add(middleware: AccessMiddleware(rules: rules))
        downloads.addRoutes(to: router.group("api/v1"))
        return router
    }
}
